"""Which function answers a request: a small route table of (method, path template, value), matched once.

The daemon's dispatch (``broker.daemon.routes``, made from the command table)
and a session's ``broker.sock`` (``broker.core.running.session_socket``, its own five
routes) both find their answering function here. A template's ``{name}`` is
one path segment of at most 64 characters (a session or request id, checked by
the function that takes it); anything else is matched exactly. The template,
never the path itself, names a request in traces and logs: an id stays out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
_PARAMETER = re.compile(r"\{(\w+)\}")
SEGMENT = "[^/]{1,64}"


@dataclass(frozen=True)
class Found(Generic[T]):
    """A request's route: what answers it, its template (``/v1/sessions/{id}``) and the template's values."""

    value: T
    template: str
    params: dict[str, str]


class Router(Generic[T]):
    """Routes by method and path; a route declared twice (the same method and template) is an error."""

    def __init__(self, routes: Iterable[tuple[str, str, T]]) -> None:
        self._exact: dict[tuple[str, str], T] = {}
        self._patterns: list[tuple[str, re.Pattern[str], str, T]] = []
        seen: set[tuple[str, str]] = set()
        for method, template, value in routes:
            if (method, template) in seen:
                raise ValueError(f"route {method} {template} is declared twice")
            seen.add((method, template))
            if _PARAMETER.search(template) is None:
                self._exact[(method, template)] = value
                continue
            pattern = _PARAMETER.sub(
                lambda m: f"(?P<{m.group(1)}>{SEGMENT})", re.escape(template).replace(r"\{", "{").replace(r"\}", "}")
            )
            self._patterns.append((method, re.compile(pattern), template, value))
        self.methods = frozenset(method for method, _ in seen)
        self.templates = frozenset(seen)

    def find(self, method: str, path: str) -> Found[T] | None:
        """What answers ``method path``, or None (a 404)."""
        exact = self._exact.get((method, path))
        if exact is not None:
            return Found(exact, path, {})
        for wanted, pattern, template, value in self._patterns:
            if wanted == method and (match := pattern.fullmatch(path)) is not None:
                return Found(value, template, match.groupdict())
        return None


def _pattern(template: str) -> str:
    """``/v1/sessions/{id}/hold`` as a regular expression: each ``{name}`` one segment, the rest literal."""
    pieces = _PARAMETER.split(template)  # literal, name, literal, name, ..., literal
    return "".join(re.escape(piece) if index % 2 == 0 else f"(?P<{piece}>{SEGMENT})"
                   for index, piece in enumerate(pieces))  # fmt: skip
