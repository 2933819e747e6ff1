"""``METHOD PATH`` routes (``github_api``) and path globs (``http``), and request paths in their one canonical form.

Patterns: a method is an upper-case token or ``*`` (any method); a path is
``*`` (every path) or ``/`` followed by segments of letters, digits and
``-._~!$&'()+,=:@``, where ``*`` is the glob of ``segments`` (one segment, or
the rest as the whole last segment). Empty, ``.`` and ``..`` segments, ``**``,
``%``, ``;``, ``?`` and a trailing ``/`` are refused as malformed. Paths are
compared in lower case, so patterns are kept in lower case.

A request path is made canonical before it is compared, so that two spellings
of one resource cannot get two answers:

- the request target is in origin form (it starts with ``/``); the query string
  is cut off and never compared; a ``#`` is refused;
- only the characters RFC 3986 allows in a path; ``;`` (path parameters, which
  some servers strip before routing) is refused;
- percent-escapes of unreserved characters are decoded (``%6Derge`` is
  ``merge``), any other escape is kept as it is, ``%00`` and broken escapes
  are refused;
- ``.`` and ``..`` segments (written or encoded) and empty segments (``//``)
  are refused; one trailing ``/`` is dropped (``/x/`` is ``/x``);
- lower case (a deny of ``.../merge`` holds for ``.../MERGE``);
- a path holding an encoded ``/`` or ``\\`` (``%2F``, ``%5C``) has two readings:
  as written (the escape inside one segment) and with the escape read as a
  separator, as some servers do. A caller decides on every reading and keeps
  the stricter answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from broker.egress.operations.segments import ANY_PATH, SegmentGlob

MAX_PATTERN = 256
METHOD = re.compile(r"[A-Z]{1,16}")
ANY_METHOD = "*"
_PATTERN_SEGMENT = re.compile(r"[a-z0-9\-._~!$&'()+,=:@*]+")
_REQUEST_PATH = re.compile(r"/[A-Za-z0-9\-._~!$&'()*+,=:@/%]*")
_ESCAPE = re.compile(r"%(.{0,2})", re.DOTALL)
_HEX = re.compile(r"[0-9A-Fa-f]{2}")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_SEPARATORS = re.compile(r"%2f|%5c")


class RouteError(ValueError):
    """A malformed pattern, or a request path the broker will not read; the message says why (input not echoed)."""


def parse_path_glob(text: str) -> SegmentGlob:
    """A path pattern: ``*`` or ``/seg/seg...`` (see the module docstring), or ``RouteError``."""
    if len(text) > MAX_PATTERN:
        raise RouteError(f"longer than {MAX_PATTERN} characters")
    if text == ANY_PATH or text == "/":
        return SegmentGlob.of(text, leading_slash=True)
    if not text.startswith("/"):
        raise RouteError("a path starts with / (or is * for every path)")
    if text.endswith("/"):
        raise RouteError("a path pattern does not end with / (a trailing / of a request is dropped)")
    lowered = text.lower()
    for segment in lowered[1:].split("/"):
        if not segment:
            raise RouteError("has an empty segment (//)")
        if segment in (".", ".."):
            raise RouteError("has a . or .. segment")
        if "**" in segment:
            raise RouteError("** is not a pattern here: a last segment * matches the rest")
        if not _PATTERN_SEGMENT.fullmatch(segment):
            raise RouteError("a segment holds a character other than letters, digits, -._~!$&'()+,=:@ and *")
    return SegmentGlob.of(lowered, leading_slash=True)


@dataclass(frozen=True)
class Route:
    """``METHOD PATH``: the method (or ``*``) and the path glob."""

    text: str
    method: str
    path: SegmentGlob

    def matches(self, method: str, path: str) -> bool:
        return (self.method == ANY_METHOD or self.method == method) and self.path.matches(path)

    def within(self, other: Route) -> bool:
        """Whether every request this route matches is matched by ``other``."""
        return (other.method == ANY_METHOD or other.method == self.method) and self.path.within(other.path)

    def __str__(self) -> str:
        return self.text


def parse_method(text: str) -> str:
    if not METHOD.fullmatch(text):
        raise RouteError("a method is an upper-case token such as GET")
    return text


def parse_route(text: str) -> Route:
    """``METHOD PATH`` with one space between, or ``RouteError``."""
    method, space, path = text.partition(" ")
    if not space:
        raise RouteError("expected METHOD PATH (GET /repos/*/*)")
    if " " in path or not method:
        raise RouteError("expected METHOD PATH with exactly one space, between the two")
    if method != ANY_METHOD:
        parse_method(method)
    return Route(text, method, parse_path_glob(path))


def _decoded(match: re.Match[str]) -> str:
    digits = match.group(1)
    if not _HEX.fullmatch(digits):
        raise RouteError("a % that is not followed by two hex digits")
    char = chr(int(digits, 16))
    if char == "\0":
        raise RouteError("an encoded NUL")
    return char if char in _UNRESERVED else "%" + digits


def _checked(segments: list[str]) -> str:
    if segments and segments[-1] == "":
        segments.pop()  # one trailing /
    for segment in segments:
        if not segment:
            raise RouteError("an empty segment (//)")
        if segment in (".", ".."):
            raise RouteError("a . or .. segment")
    return "/" + "/".join(segments)


def request_paths(target: str) -> tuple[str, ...]:
    """The canonical readings of a request target's path (one, or two with an encoded separator), or ``RouteError``."""
    path = target.partition("?")[0]
    if "#" in target:
        raise RouteError("a request target holds no fragment (#)")
    if not path.startswith("/"):
        raise RouteError("the request target is not a path (origin form)")
    if not _REQUEST_PATH.fullmatch(path):
        raise RouteError("the path holds characters RFC 3986 does not allow there, or ;")
    text = _ESCAPE.sub(_decoded, path).lower()
    written = _checked(text[1:].split("/")) if text != "/" else "/"
    if not _SEPARATORS.search(written):
        return (written,)
    split = _checked(_SEPARATORS.sub("/", written)[1:].split("/"))
    return (written, split)


def query_of(target: str) -> str:
    return target.partition("?")[2]
