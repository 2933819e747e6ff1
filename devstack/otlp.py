"""A real OTLP/HTTP trace receiver on loopback: what an OpenTelemetry collector's ``otlphttp`` receiver does.

``OtlpReceiver`` accepts ``POST /v1/traces`` with a protobuf
``ExportTraceServiceRequest`` body (``Content-Type: application/x-protobuf``,
gzip or deflate ``Content-Encoding`` allowed), decodes it with the
``opentelemetry-proto`` classes and answers ``200`` with an empty
``ExportTraceServiceResponse``, as the collector does; anything else is
``404``/``415``/``400``. It keeps every body as received (``bodies``, so a
test can search the very bytes for a secret) and every span decoded
(``spans``: name, trace and span ids, parent, attributes, status, the
resource's attributes). ``answer`` may be set to another status (``503``) to
play a failing collector. ``hanging_port`` gives a port that accepts
connections and never answers: a collector that hangs.

Run alone, it prints each span it receives: ``python -m devstack.otlp [PORT]``.
"""

from __future__ import annotations

import contextlib
import gzip
import socket
import sys
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY = 16 * 1024 * 1024


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # hex
    span_id: str
    parent_span_id: str  # "" for a root span
    attributes: dict[str, Any]
    status: int  # 0 unset, 1 ok, 2 error
    status_message: str
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""


def _value(value: Any) -> Any:
    """An ``AnyValue`` as the Python value it carries."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: _value(item.value) for item in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ``ExportTraceServiceRequest``."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        status=int(span.status.code),
                        status_message=span.status.message,
                        resource=resource,
                        scope=scope_spans.scope.name,
                    )
                )
    return spans


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    receiver: OtlpReceiver


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        receiver = self.server.receiver
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return self._reply(413, b"")
        body = self.rfile.read(length)
        if self.path != "/v1/traces":
            return self._reply(404, b"")
        if self.headers.get("Content-Type", "").split(";")[0].strip() != "application/x-protobuf":
            return self._reply(415, b"")
        encoding = self.headers.get("Content-Encoding", "").strip().lower()
        try:
            raw = gzip.decompress(body) if encoding == "gzip" else zlib.decompress(body) if encoding else body
            spans = decode(raw)
        except Exception:  # a body that is not a trace export: the collector answers 400
            return self._reply(400, b"")
        receiver.record(raw, {name.lower(): value for name, value in self.headers.items()}, spans)
        if receiver.answer != 200:
            return self._reply(receiver.answer, b"")
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        self._reply(200, ExportTraceServiceResponse().SerializeToString())

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


class OtlpReceiver:
    """The receiver on ``127.0.0.1:port`` (0: any free port); see the module docstring."""

    def __init__(self, port: int = 0) -> None:
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.answer = 200
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Condition()
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.receiver = self
        self.port = int(self._server.server_address[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp", daemon=True)

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def record(self, body: bytes, headers: dict[str, str], spans: list[ReceivedSpan]) -> None:
        with self._lock:
            self.bodies.append(body)
            self.headers.append(headers)
            if self.answer == 200:
                self._spans.extend(spans)
            self._lock.notify_all()

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[ReceivedSpan]:
        """The spans once at least ``count`` arrived (fewer after ``timeout``)."""
        with self._lock:
            self._lock.wait_for(lambda: len(self._spans) >= count, timeout)
            return list(self._spans)

    def clear(self) -> None:
        with self._lock:
            self.bodies.clear()
            self.headers.clear()
            self._spans.clear()


@contextlib.contextmanager
def hanging_port() -> Iterator[int]:
    """A loopback port whose connections are accepted by the kernel and never answered."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield int(sock.getsockname()[1])


def main(argv: list[str]) -> int:
    port = int(argv[0]) if argv else 4318
    with OtlpReceiver(port) as receiver:
        print(f"OTLP/HTTP receiver on {receiver.endpoint}/v1/traces", flush=True)
        seen = 0
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                spans = receiver.wait_for(seen + 1, timeout=1.0)
                for span in spans[seen:]:
                    parent = span.parent_span_id or "-"
                    print(f"{span.trace_id[:8]} {span.span_id[:8]} <- {parent[:8]} {span.name} {span.attributes}")
                seen = len(spans)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
