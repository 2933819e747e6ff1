"""Spans around the broker's steps, at no cost unless ``[telemetry] otlp_endpoint`` turned tracing on.

Every layer may call ``span(name, **attributes)``: a context manager that,
with tracing off (the default), is one shared object whose ``__enter__`` and
``__exit__`` do nothing. ``broker.telemetry.traces.start_tracing`` installs a
``Backend`` (the OpenTelemetry SDK); only then are spans made and exported.
This module imports nothing but the standard library, so calling it never
loads OpenTelemetry.

Attributes carry ids, never secrets, and this module enforces it: a keyword
must be one of ``ATTRIBUTES`` (session, task, credential, provider, ... each
mapped to its OpenTelemetry name) and a value a ``bool``, ``int``, ``float``
or a printable string of at most ``MAX_VALUE`` characters. Anything else (a
``Secret``, a token in a keyword of its own, a message) is dropped before it
reaches the backend, and the span counts what it dropped in
``broker.attributes.dropped``. An exception leaving a span marks it failed
with the exception's class name only, never its message.

Work handed to another thread keeps its place in the trace with
``carried(fn)`` (``fn`` itself when tracing is off).
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Final, ParamSpec, Protocol, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
Value = str | bool | int | float

#: The attributes a span may carry: keyword -> OpenTelemetry attribute name. Ids and outcomes only.
ATTRIBUTES: Final[dict[str, str]] = {
    "command": "broker.command",
    "session": "broker.session.id",
    "parent": "broker.session.parent",
    "task": "broker.task",
    "requester": "broker.requester",
    "host": "broker.host",
    "credential": "broker.credential.name",
    "provider": "broker.provider.name",
    "provider_type": "broker.provider.type",
    "request_id": "broker.request.id",
    "rule": "broker.policy.rule",
    "decision": "broker.policy.decision",
    "outcome": "broker.outcome",
    "count": "broker.count",
    "event": "broker.log.event",
    "seq": "broker.log.seq",
    "role": "broker.aws.role",
    "exit_code": "broker.exit_code",
    "method": "http.request.method",
    "route": "http.route",
    "status": "http.response.status_code",
}
DROPPED: Final = "broker.attributes.dropped"
MAX_VALUE: Final = 128
_PRINTABLE = re.compile(r"[\x20-\x7e]*")
#: Span names are constants of the code: words, dots, spaces, a method and a route template.
SPAN_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_./{} -]{0,63}")


class Span(Protocol):
    """What a ``with span(...) as s`` block may do: add attributes learned during the step."""

    def set(self, **attributes: object) -> None: ...


class Backend(Protocol):
    """A tracer: ``open`` makes a span from checked attributes; ``carry`` binds ``fn`` to the current trace."""

    @abstractmethod
    def open(self, name: str, attributes: dict[str, Value], dropped: int) -> AbstractContextManager[Span]: ...

    @abstractmethod
    def carry(self, fn: Callable[P, R]) -> Callable[P, R]: ...

    @abstractmethod
    def annotate(self, attributes: dict[str, Value], dropped: int) -> None:
        """Add checked attributes to the current span (none open: nothing)."""


class _Off:
    """The span of tracing off: one shared instance, nothing done."""

    __slots__ = ()

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        return None

    def set(self, **attributes: object) -> None:
        return None


OFF: Final = _Off()
_backend: Backend | None = None


def span(name: str, **attributes: object) -> AbstractContextManager[Span]:
    """A span named ``name`` (a constant) with id attributes; nothing at all while tracing is off."""
    backend = _backend
    if backend is None:
        return OFF
    checked, dropped = checked_attributes(attributes)
    return backend.open(name if SPAN_NAME.fullmatch(name) else "unnamed", checked, dropped)


def carried(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` bound to the current span, to run on another thread as its child (``fn`` itself when off)."""
    backend = _backend
    return fn if backend is None else backend.carry(fn)


def annotate(**attributes: object) -> None:
    """Add id attributes to the innermost open span: a command's or a request's root, outside any step."""
    backend = _backend
    if backend is not None:
        checked, dropped = checked_attributes(attributes)
        backend.annotate(checked, dropped)


def enabled() -> bool:
    return _backend is not None


def checked_attributes(attributes: dict[str, object]) -> tuple[dict[str, Value], int]:
    """The allowed attributes under their OpenTelemetry names, and how many were dropped."""
    checked: dict[str, Value] = {}
    dropped = 0
    for key, value in attributes.items():
        name = ATTRIBUTES.get(key)
        kept = _value(value) if name is not None else None
        if name is None or kept is None:
            dropped += value is not None
            continue
        checked[name] = kept
    return checked, dropped


def _value(value: object) -> Value | None:
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        text = str.__str__(value)  # a StrEnum as its value; a subclass cannot render something else
        return text if len(text) <= MAX_VALUE and _PRINTABLE.fullmatch(text) else None
    return None


def install(backend: Backend) -> None:
    """Turn tracing on (``broker.telemetry.traces`` does, once per process)."""
    global _backend
    _backend = backend


def uninstall() -> None:
    """Turn tracing off again: later spans cost nothing."""
    global _backend
    _backend = None
