"""HTTP/1.1 on one accepted Unix-socket connection, parsed by h11 (no hand-written parser), JSON in and out.

The daemon (``broker.daemon``), its metrics listener and a delegating
session's socket (``broker.core.running.session_socket``) serve their peers
with it, each connection accepted by ``broker.host.serving.listening``.

Keep-alive is supported; a request that h11 cannot parse, or whose body is
too large, gets 400/413 with the usual ``{"error", "exit_code"}`` body and the
connection is closed. A connection whose next request head is not complete
within the listener's head deadline (``HEAD_DEADLINE`` unless it says
otherwise) of the connection (or of the previous answer) is closed, so an
idle peer holds nothing for long: silently when it sent nothing, with 408
when it sent part of a head. While the daemon is stopping, an idle connection is closed and the answer in flight says
``Connection: close``. ``busy`` is the one answer given without reading a
request: 503 when a peer holds more connections than it may.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import h11

MAX_HEAD = 16 * 1024
MAX_BODY = 1024 * 1024
POLL = 0.5  # how often an idle connection looks whether the daemon is stopping
HEAD_DEADLINE = 10.0  # a request head must be complete within this of the connection or the previous answer
REQUEST_DEADLINE = 30.0  # a started request must arrive whole within this


@dataclass(frozen=True)
class Raw:
    """An answer that is not JSON: its bytes as they are, with their content type (the metrics' text format)."""

    body: bytes
    content_type: str


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    body: bytes


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Send(Protocol):
    """Answer the request: ``exit_code`` (``Broker-Exit-Code``) is what the CLI exits with, e.g. 5 when incomplete;
    ``incomplete`` (``Broker-Incomplete``) names the sessions that left something pending."""

    def __call__(self, status: int, document: Any, exit_code: int = 0, incomplete: str = "") -> None: ...


Handler = Callable[[Request, Send], None]


#: The HTTP status that says what an exit code says (a revoke left pending, 5, is still a 200; 8 waits: 202).
HTTP_STATUS = {1: 500, 2: 400, 3: 403, 4: 502, 5: 200, 6: 500, 7: 503, 8: 202}


def error_body(message: str, exit_code: int) -> dict[str, Any]:
    return {"error": " ".join(message.split()), "exit_code": exit_code}


def serve_connection(
    sock: socket.socket, handle: Handler, stopping: threading.Event, head_deadline: float = HEAD_DEADLINE
) -> None:
    """Serve the requests of one connection, one after another, until the peer closes or ``stopping``; a request
    head must be complete within ``head_deadline`` of the connection or of the previous answer (the listener's
    ``Limits.head_deadline``)."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    sock.settimeout(POLL)
    while True:
        try:
            request = _read_request(sock, conn, stopping, head_deadline)
        except BadRequest as exc:
            _refuse(sock, conn, exc.status, exc.message)
            return
        if request is None:
            return

        def send(status: int, document: Any, exit_code: int = 0, incomplete: str = "") -> None:
            if isinstance(document, Raw):
                body, kind = document.body, document.content_type
            else:
                body, kind = json.dumps(document, indent=2).encode() + b"\n", "application/json"
            headers = [("content-type", kind), ("content-length", str(len(body)))]
            if exit_code:
                headers.append(("broker-exit-code", str(exit_code)))
            if incomplete:
                headers.append(("broker-incomplete", incomplete))
            if stopping.is_set():
                headers.append(("connection", "close"))
            data = conn.send(h11.Response(status_code=status, headers=headers)) or b""
            data += conn.send(h11.Data(data=body)) or b""
            data += conn.send(h11.EndOfMessage()) or b""
            sock.sendall(data)  # once: a peer that read it all and left must not fail an empty write after it

        handle(request, send)
        if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE or stopping.is_set():
            return
        conn.start_next_cycle()


def _read_request(
    sock: socket.socket, conn: h11.Connection, stopping: threading.Event, head_deadline: float
) -> Request | None:
    """The next whole request, or None when the peer closed (or the daemon stops) between requests."""
    head: h11.Request | None = None
    body = bytearray()
    waiting = time.monotonic()
    started: float | None = None
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise BadRequest(400, f"malformed HTTP request: {exc}") from None
        if event is h11.NEED_DATA:
            data = _receive(sock, conn, stopping, started, None if head is not None else waiting, head_deadline)
            if data is None:
                return None
            started = started if started is not None else time.monotonic()
            conn.receive_data(data)
            continue
        if isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY:
                raise BadRequest(413, f"request body larger than {MAX_BODY} bytes")
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            return Request(head.method.decode("ascii", "replace"), head.target.decode("ascii", "replace"), bytes(body))
        elif isinstance(event, h11.ConnectionClosed):
            if head is not None or started is not None:
                raise BadRequest(400, "malformed HTTP request: the connection closed in the middle of it")
            return None


def _receive(
    sock: socket.socket,
    conn: h11.Connection,
    stopping: threading.Event,
    started: float | None,
    waiting: float | None,
    head_deadline: float,
) -> bytes | None:
    """The next bytes; None to close quietly. ``waiting``: since when the head is awaited (None once it came)."""
    while True:
        try:
            return sock.recv(65536)
        except TimeoutError:
            now = time.monotonic()
            if started is None and conn.their_state is h11.IDLE and stopping.is_set():
                return None  # idle between requests: nothing is lost by closing
            if waiting is not None and now - waiting > head_deadline:
                if started is None:
                    return None  # not a byte in time: an idle peer holds no connection
                raise BadRequest(408, "the request head did not arrive in time") from None
            if started is not None and now - started > REQUEST_DEADLINE:
                raise BadRequest(408, "the request did not arrive in time") from None
        except OSError:
            return None


def _refuse(sock: socket.socket, conn: h11.Connection, status: int, message: str) -> None:
    body = json.dumps(error_body(message, 2)).encode() + b"\n"
    headers = [("content-type", "application/json"), ("content-length", str(len(body))), ("connection", "close")]
    try:
        data = conn.send(h11.Response(status_code=status, headers=headers)) or b""
        data += conn.send(h11.Data(data=body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
    except h11.LocalProtocolError:  # h11 cannot answer in this state: the same answer, written out plainly
        reason = {400: "Bad Request", 408: "Request Timeout", 413: "Content Too Large"}.get(status, "Error")
        lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers), "", ""]
        data = "\r\n".join(lines).encode("ascii") + body
    with contextlib.suppress(OSError):
        sock.sendall(data)


def busy(sock: socket.socket, message: str, exit_code: int) -> None:
    """Answer 503 before any request is read, and close: never waits on the peer (the accept loop calls it)."""
    body = json.dumps(error_body(message, exit_code)).encode() + b"\n"
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        sock.send(head.encode("ascii") + body)  # far less than an empty socket buffer holds
        sock.shutdown(socket.SHUT_WR)
        for _ in range(4):  # what the peer sent already (a request head): read, so closing resets nothing it reads
            if not sock.recv(MAX_HEAD):
                break
    sock.close()
