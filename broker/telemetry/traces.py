"""Tracing on: the OpenTelemetry SDK behind ``broker.vocab.tracing``, exporting OTLP/HTTP protobuf.

``start_tracing(settings, host=...)`` is called once per process when
``[telemetry] otlp_endpoint`` is set (a command before its work, the daemon
as it starts); nothing else imports OpenTelemetry, which is the optional
extra ``broker[otel]``. Spans are batched in memory and sent by the SDK's
worker thread; ``Tracing.close(timeout)`` sends what is left and returns
within ``timeout`` whatever the collector does (refusing, hanging, gone):
a command is never held longer than that by its traces, and the SDK's own
exit hook, which could wait 30 s, is not installed.

Spans carry only what ``broker.vocab.tracing`` let through (ids, never
secrets); an exception leaving a span sets its status to ERROR with the
exception's class name as ``error.type`` (and a ``BrokerError``'s exit
code), never its message or traceback. The SDK's own log lines are kept
off stderr; a failed export is one warning on the ``broker.telemetry``
logger per failure streak.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from broker import __version__
from broker.telemetry.settings import TelemetryConfig, read_headers
from broker.vocab import tracing
from broker.vocab.errors import BrokerError, ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.trace import Span as OtelSpan
    from opentelemetry.trace import Tracer

P = ParamSpec("P")
R = TypeVar("R")
LOG = logging.getLogger("broker.telemetry")
EXTRA = "pip install 'scoped-credential-broker[otel]'"


class _Span:
    """A live span as ``broker.vocab.tracing.Span``: attributes set later are checked the same way."""

    __slots__ = ("_span",)

    def __init__(self, span: OtelSpan) -> None:
        self._span = span

    def set(self, **attributes: object) -> None:
        checked, dropped = tracing.checked_attributes(attributes)
        self._span.set_attributes(checked)
        if dropped:
            _count_dropped(self._span, dropped)


def _count_dropped(span: OtelSpan, dropped: int) -> None:
    before = getattr(span, "attributes", None) or {}
    span.set_attribute(tracing.DROPPED, int(before.get(tracing.DROPPED, 0)) + dropped)


class OtelBackend:
    """``broker.vocab.tracing.Backend`` over an OpenTelemetry tracer."""

    def __init__(self, tracer: Tracer) -> None:
        from opentelemetry import context
        from opentelemetry.trace import Status, StatusCode

        self._tracer = tracer
        self._context = context
        self._error = Status(StatusCode.ERROR)

    @contextlib.contextmanager
    def open(self, name: str, attributes: dict[str, tracing.Value], dropped: int) -> Iterator[tracing.Span]:
        if dropped:
            attributes = {**attributes, tracing.DROPPED: dropped}
        with self._tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            try:
                yield _Span(span)
            except BaseException as exc:
                span.set_status(self._error)
                span.set_attribute("error.type", type(exc).__qualname__)
                if isinstance(exc, BrokerError):
                    span.set_attribute("broker.exit_code", exc.exit_code)
                raise

    def annotate(self, attributes: dict[str, tracing.Value], dropped: int) -> None:
        from opentelemetry import trace

        current = trace.get_current_span()
        current.set_attributes(attributes)
        if dropped:
            _count_dropped(current, dropped)

    def carry(self, fn: Callable[P, R]) -> Callable[P, R]:
        captured = self._context.get_current()
        context = self._context

        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            token = context.attach(captured)
            try:
                return fn(*args, **kwargs)
            finally:
                context.detach(token)

        return run


def _recording(exporter: SpanExporter, endpoint: str) -> Any:
    """``exporter`` that remembers whether its last batch went out, and warns once per failure streak."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Recording(SpanExporter):
        def __init__(self) -> None:
            self.failing = False
            self.sent = 0
            self._lock = threading.Lock()

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            result = exporter.export(spans)
            if result is SpanExportResult.SUCCESS:
                self.sent += len(spans)
                self.delivered()
            else:
                self.failed("the collector refused or did not answer")
            return result

        def delivered(self) -> None:
            with self._lock:
                if self.failing:
                    LOG.info("traces reach %s again", endpoint)
                self.failing = False

        def failed(self, why: str) -> None:
            with self._lock:
                if not self.failing:
                    LOG.warning("traces not delivered to %s (%s)", endpoint, why)
                self.failing = True

        def shutdown(self) -> None:
            exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return exporter.force_flush(timeout_millis)

    return Recording()


class Tracing:
    """Tracing of this process, on until ``close``."""

    def __init__(
        self, provider: TracerProvider, processor: BatchSpanProcessor, exporter: Any, settings: TelemetryConfig
    ) -> None:
        self.provider = provider
        self.settings = settings
        self._processor = processor
        self._exporter = exporter

    @property
    def delivered(self) -> bool:
        """Whether the last batch reached the collector (True before any was sent)."""
        return not self._exporter.failing

    @property
    def sent(self) -> int:
        """Spans the collector accepted so far."""
        return int(self._exporter.sent)

    def flush(self, timeout: float | None = None) -> bool:
        """Send the spans ended so far; True when they reached the collector within ``timeout`` seconds."""
        finished = threading.Event()

        def run() -> None:
            self._processor.force_flush()
            finished.set()

        threading.Thread(target=run, name="trace-flush", daemon=True).start()
        bound = self.settings.timeout if timeout is None else timeout
        if not finished.wait(bound):
            self._exporter.failed(f"no answer within {bound:g}s")
            return False
        return self.delivered

    def close(self, timeout: float | None = None) -> bool:
        """Stop tracing (later spans cost nothing) and flush what was recorded, waiting at most ``timeout``."""
        tracing.uninstall()
        delivered = self.flush(timeout)
        threading.Thread(target=self._exporter.shutdown, name="trace-close", daemon=True).start()
        return delivered


def start_tracing(settings: TelemetryConfig, *, host: str) -> Tracing:
    """Install the OpenTelemetry SDK as the backend of ``broker.vocab.tracing``; ConfigError without it."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise ConfigError(f"[telemetry] otlp_endpoint needs OpenTelemetry: {EXTRA}") from None
    headers = read_headers(settings.headers_file) if settings.headers_file else {}
    quiet = logging.getLogger("opentelemetry")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False  # the SDK's retries and errors are the broker.telemetry warning above
    exporter = OTLPSpanExporter(
        endpoint=settings.otlp_endpoint,
        headers={name: value.reveal() for name, value in headers.items()},
        timeout=settings.timeout,
        certificate_file=str(settings.ca_file) if settings.ca_file else None,
    )
    recording = _recording(exporter, settings.otlp_endpoint)
    resource = Resource({"service.name": settings.service_name, "service.version": __version__, "host.name": host})
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    processor = BatchSpanProcessor(recording, max_queue_size=4096, schedule_delay_millis=2000)
    provider.add_span_processor(processor)
    tracing.install(OtelBackend(provider.get_tracer("broker", __version__)))
    return Tracing(provider, processor, recording, settings)
