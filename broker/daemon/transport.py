"""One HTTP/1.1 request to the daemon over its Unix socket (h11, as the daemon): the thin client and doctor use it."""

from __future__ import annotations

import contextlib
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
    with Connection(path) as connection:
        return connection.request(method, target, body)


class Connection:
    """One kept connection to the daemon: several requests in turn (``exec`` holds its session on it)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            self.sock.connect(path)
        except OSError as exc:
            self.sock.close()
            raise DaemonUnreachable(f"cannot reach the broker daemon at {path} ({exc.strerror or exc})") from None
        self.conn = h11.Connection(h11.CLIENT)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def request(self, method: str, target: str, body: Any = None) -> Answer:
        """Send the request, wait for its whole answer; a connection that broke is exit 7.

        A daemon over its connection limits answers 503 and closes before it
        reads anything: the request then cannot be sent, and that answer is
        what is returned.
        """
        try:
            self.send(method, target, body)
        except DaemonUnreachable as unsent:
            try:
                return self.answer()
            except DaemonUnreachable:
                raise unsent from None
        return self.answer()

    def send(self, method: str, target: str, body: Any = None) -> None:
        payload = b"" if body is None else json.dumps(body).encode()
        headers = [("host", "broker"), ("content-length", str(len(payload)))]
        if body is not None:
            headers.append(("content-type", "application/json"))
        try:
            if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
                self.conn.start_next_cycle()
            self.sock.sendall(self.conn.send(h11.Request(method=method, target=target, headers=headers)) or b"")
            self.sock.sendall(self.conn.send(h11.Data(data=payload)) or b"")
            self.sock.sendall(self.conn.send(h11.EndOfMessage()) or b"")
        except (OSError, h11.ProtocolError) as exc:
            raise self._broken(exc) from None

    def answer(self) -> Answer:
        try:
            return _read_answer(self.sock, self.conn)
        except (OSError, h11.ProtocolError) as exc:
            raise self._broken(exc) from None

    def done_sending(self) -> None:
        """Tell the daemon this side has nothing more to say (it still answers what was asked)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def _broken(self, exc: Exception) -> DaemonUnreachable:
        return DaemonUnreachable(f"the broker daemon at {self.path} did not answer ({type(exc).__name__})")


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
