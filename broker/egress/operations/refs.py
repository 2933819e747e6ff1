"""Git ref names: the checks ``git check-ref-format`` makes, for the refs a push names and the ``push`` globs.

A push names full ref names (``refs/heads/x``). ``git receive-pack`` itself
refuses names that break these rules ("funny refname"), and so does the
broker, before any glob is matched: a name such as ``refs/heads/agent/../main``
is never compared with ``refs/heads/agent/*``. Ref names are compared as
written: case matters, as it does to git.

A ``push`` glob follows the same rules with ``*`` allowed inside a segment
(see ``segments``): it starts with ``refs/``, and ``refs/heads/agent/*`` is a
branch under ``agent/`` at any depth.
"""

from __future__ import annotations

import re

from broker.egress.operations.segments import SegmentGlob

MAX_REF = 1024
MAX_GLOB = 256
_FORBIDDEN = frozenset(" ~^:?*[\\\x7f") | frozenset(chr(c) for c in range(0x20))
#: Every rule of ``_check_segments`` at once (for a name without ``*``): a match means some rule is broken.
_ANY_RULE_BROKEN = re.compile(r"[\x00-\x20~^:?*\[\\\x7f]|\.\.|@\{|//|(?:^|/)\.|\.lock(?:/|$)|[/.]$")


class RefError(ValueError):
    """A ref name or ``push`` glob that breaks git's rules; the message says which rule (input not echoed)."""


def _check_segments(name: str, *, glob: bool) -> None:
    if not name.startswith("refs/"):
        raise RefError("a full ref name starts with refs/")
    if name.endswith("/"):
        raise RefError("ends with /")
    if name.endswith("."):
        raise RefError("ends with .")
    if ".." in name:
        raise RefError("contains ..")
    if "@{" in name:
        raise RefError("contains @{")
    for segment in name.split("/"):
        if not segment:
            raise RefError("has an empty segment (//)")
        if segment.startswith("."):
            raise RefError("a segment starts with .")
        if segment.endswith(".lock"):
            raise RefError("a segment ends with .lock")
        bad = set(segment) & _FORBIDDEN
        if glob:
            bad.discard("*")
            if "**" in segment:
                raise RefError("** is not a pattern here: a last segment * matches the rest")
        if bad:
            raise RefError("contains a space, a control character or one of ~ ^ : ? * [ \\")


def check_ref_name(name: str) -> None:
    """A full ref name a push may name, or ``RefError``."""
    if len(name) > MAX_REF:
        raise RefError(f"longer than {MAX_REF} characters")
    if name.startswith("refs/") and not _ANY_RULE_BROKEN.search(name):
        return  # the common case in one regular expression; the rules one by one name what is wrong
    _check_segments(name, glob=False)


def parse_ref_glob(text: str) -> SegmentGlob:
    """One ``push`` glob, or ``RefError``."""
    if len(text) > MAX_GLOB:
        raise RefError(f"longer than {MAX_GLOB} characters")
    _check_segments(text, glob=True)
    return SegmentGlob.of(text, leading_slash=False)
