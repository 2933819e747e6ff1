"""One command, one trace: its root span ``broker <command>``, opened once the config turns tracing on, closed at exit.

``traced(run)`` wraps a whole command line: ``run()`` is the command, and
whatever way it ends (an exit code, a ``BrokerError``, an interrupt, a
bug), the root span is closed with the exit code (``broker.exit_code``) and
the outcome, and the spans are sent within ``[telemetry] timeout``. The root
span opens when the command has read its config (``started``, called where
the config is loaded): without ``[telemetry] otlp_endpoint`` nothing is
started and nothing of OpenTelemetry is imported, so a command pays for
this module alone (the standard library). ``broker serve`` is not one
command but many requests: the daemon traces each request itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from broker.vocab.errors import BrokerError
from broker.vocab.tracing import Span, span

if TYPE_CHECKING:
    from broker.telemetry.settings import TelemetryConfig
    from broker.telemetry.traces import Tracing

NOT_TRACED = ("broker serve",)  # traced request by request, not as one command


class _Command:
    """The trace of this process's command, once started."""

    def __init__(self) -> None:
        self.tracing: Tracing | None = None
        self.root: AbstractContextManager[Span] | None = None
        self.span: Span | None = None
        self.depth = 0  # ``traced`` calls in progress (a command line runs one)


_COMMAND = _Command()


def started(command: str, settings: TelemetryConfig | None, host: str) -> None:
    """The command (``broker revoke``) has read its config: with ``otlp_endpoint`` set, its trace starts now."""
    if settings is None or _COMMAND.tracing is not None or _COMMAND.depth == 0 or command in NOT_TRACED:
        return
    from broker.telemetry.traces import start_tracing

    _COMMAND.tracing = start_tracing(settings, host=host)
    _COMMAND.root = span(command, command=command.removeprefix("broker "), host=host)
    _COMMAND.span = _COMMAND.root.__enter__()


def traced(run: Callable[[], int]) -> int:
    """``run()``'s exit code; its trace (if ``started`` began one) closed on every way out, waiting a bounded time."""
    _COMMAND.depth += 1
    try:
        code = run()
    except BaseException as exc:
        _finish(_exit_code(exc), exc)
        raise
    finally:
        _COMMAND.depth -= 1
    _finish(code, None)
    return code


def _exit_code(exc: BaseException) -> int:
    if isinstance(exc, BrokerError):
        return exc.exit_code
    return 130 if isinstance(exc, KeyboardInterrupt) else 1


def _finish(code: int, error: BaseException | None) -> None:
    root, tracing, traced_span = _COMMAND.root, _COMMAND.tracing, _COMMAND.span
    _COMMAND.root = _COMMAND.span = _COMMAND.tracing = None
    if root is None or tracing is None:
        return
    if traced_span is not None:
        traced_span.set(exit_code=code, outcome="ok" if code == 0 else "failed")
    with contextlib.suppress(BaseException):  # the error is the command's to report, not the span's
        root.__exit__(type(error) if error else None, error, error.__traceback__ if error else None)
    tracing.close()  # within [telemetry] timeout; a collector that did not take them is one warning line
