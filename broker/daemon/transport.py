"""One HTTP/1.1 request to the daemon over its Unix socket (h11, as the daemon): the thin client and doctor use it."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any

import h11

from broker.vocab.errors import DaemonUnreachable

MAX_ANSWER = 64 * 1024 * 1024


@dataclass(frozen=True)
class Answer:
    status: int
    document: Any
    exit_code: int  # Broker-Exit-Code, or the error's exit_code, or 0
    incomplete: tuple[str, ...] = ()  # Broker-Incomplete: sessions a revoke left pending


def call(path: str, method: str, target: str, body: Any = None) -> Answer:
    payload = b"" if body is None else json.dumps(body).encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        try:
            sock.connect(path)
        except OSError as exc:
            raise DaemonUnreachable(f"cannot reach the broker daemon at {path} ({exc.strerror or exc})") from None
        conn = h11.Connection(h11.CLIENT)
        headers = [("host", "broker"), ("content-length", str(len(payload)))]
        if body is not None:
            headers.append(("content-type", "application/json"))
        try:
            sock.sendall(conn.send(h11.Request(method=method, target=target, headers=headers)) or b"")
            sock.sendall(conn.send(h11.Data(data=payload)) or b"")
            sock.sendall(conn.send(h11.EndOfMessage()) or b"")
            return _read_answer(sock, conn)
        except (OSError, h11.ProtocolError) as exc:
            raise DaemonUnreachable(f"the broker daemon at {path} did not answer ({type(exc).__name__})") from None
    finally:
        sock.close()


def _read_answer(sock: socket.socket, conn: h11.Connection) -> Answer:
    head: h11.Response | None = None
    data = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))
        elif isinstance(event, h11.Response):
            head = event
        elif isinstance(event, h11.Data):
            data += event.data
            if len(data) > MAX_ANSWER:
                raise DaemonUnreachable("the broker daemon's answer is too large")
        elif isinstance(event, h11.EndOfMessage):
            break
        elif isinstance(event, h11.ConnectionClosed):
            raise ConnectionResetError("closed before the answer ended")
    assert head is not None
    try:
        document = json.loads(data)
    except ValueError:
        raise DaemonUnreachable(f"the broker daemon answered {head.status_code} without a JSON body") from None
    exit_code, incomplete = 0, tuple[str, ...]()
    for name, value in head.headers:
        if name == b"broker-exit-code" and value.isdigit():
            exit_code = int(value)
        elif name == b"broker-incomplete":
            incomplete = tuple(value.decode("ascii", "replace").split(","))
    if head.status_code >= 400 and isinstance(document, dict):
        code = document.get("exit_code")
        exit_code = code if isinstance(code, int) and 1 <= code <= 125 else 1
    return Answer(head.status_code, document, exit_code, incomplete)
