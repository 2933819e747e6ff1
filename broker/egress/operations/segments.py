"""Segment globs, the one glob language of ``operations``: git refs and request paths, matching and containment.

Refs (``refs/heads/agent/*``) and paths (``/repos/*/*/pulls/*``) are both
``/``-separated segments. In a pattern:

- a ``*`` inside a segment matches any run of characters of that segment,
  never a ``/`` (``refs/tags/v*`` matches ``refs/tags/v1.2``, not
  ``refs/tags/v1/x``);
- a last segment that is exactly ``*`` matches the rest: one or more further
  segments (``refs/heads/agent/*`` matches ``refs/heads/agent/x`` and
  ``refs/heads/agent/x/y``, never ``refs/heads/agent`` itself);
- the path pattern ``*`` on its own matches every path, ``/`` included.

Nothing else is special. The ref and path modules check which characters a
segment may hold; this module only matches and compares.

Containment (``within``) is exact: every value one pattern matches is matched by
the other. Segment by segment it is ``broker.vocab.globs.glob_within`` (a
segment holds no ``/``, so the IAM-style glob of that function is the same
language); the rest form is compared by counting segments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from broker.vocab.globs import glob_within

ANY_PATH = "*"


def _segment_regex(segment: str) -> str:
    """One segment glob as a regular expression that cannot backtrack: linear in the segment's length.

    ``a*b*c`` is ``a``, then the leftmost ``b`` (found and committed: an atomic
    group), then anything and ``c`` ending the segment. Taking each middle piece
    at its leftmost place leaves the most room for the rest, so nothing is
    lost; a plain ``a[^/]*b[^/]*c`` would try every split and a hostile path
    against ``*a*a*a*a*b`` would take hours.
    """
    pieces = [re.escape(piece) for piece in segment.split("*")]
    if len(pieces) == 1:
        return pieces[0]
    first, *middle, last = pieces
    committed = "".join(f"(?>[^/]*?{piece})" for piece in middle)
    return f"(?>{first}{committed}[^/]*{last}(?=/|\\Z))"


@dataclass(frozen=True)
class SegmentGlob:
    """One pattern: its fixed segments, then (``rest``) one or more further segments; or every path (``anything``)."""

    text: str
    segments: tuple[str, ...]
    rest: bool = False
    anything: bool = False
    leading_slash: bool = True
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.anything:
            source = ".*"
        else:
            parts = [_segment_regex(s) for s in self.segments]
            body = "".join("/" + p for p in parts) if self.leading_slash else "/".join(parts)
            source = (body + ("(?:/[^/]+)+" if self.rest else "")) or "/"
        object.__setattr__(self, "_regex", re.compile(source, re.DOTALL))

    @classmethod
    def of(cls, text: str, *, leading_slash: bool) -> SegmentGlob:
        """The pattern ``text`` (already checked for its characters); ``leading_slash``: a path, not a ref."""
        if leading_slash and text == ANY_PATH:
            return cls(text, (), anything=True)
        body = text[1:] if leading_slash else text
        segments = tuple(body.split("/")) if body else ()
        if segments and segments[-1] == "*":
            return cls(text, segments[:-1], rest=True, leading_slash=leading_slash)
        return cls(text, segments, leading_slash=leading_slash)

    def matches(self, value: str) -> bool:
        """Whether ``value`` (a canonical ref or path, see the ref and path modules) is matched."""
        return self._regex.fullmatch(value) is not None

    def within(self, other: SegmentGlob) -> bool:
        """Whether every value this pattern matches is matched by ``other``."""
        if other.anything:
            return True
        if self.anything:
            return False
        if self.leading_slash != other.leading_slash:
            return False
        if other.rest:
            # other: k fixed segments then at least one more. Every value of self has
            # len(self.segments) fixed segments (+ at least one more when self.rest).
            least = len(self.segments) + (1 if self.rest else 0)
            if least < len(other.segments) + 1:
                return False
        elif self.rest or len(self.segments) != len(other.segments):
            return False
        return all(glob_within(mine, theirs) for mine, theirs in zip(self.segments, other.segments, strict=False))

    def __str__(self) -> str:
        return self.text
