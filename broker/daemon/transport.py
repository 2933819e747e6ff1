"""One HTTP/1.1 request to the daemon over its Unix socket, and its answer: the thin client and doctor use it.

The daemon parses what peers send with h11 (``broker.host.serving.wire``): that is
where untrusted bytes arrive, from any local user. This side reads only the
answers of its own daemon, whose framing ``wire`` fixes: a status line, a few
headers, a ``Content-Length`` JSON body, never chunked, never a 1xx. So it
writes requests and reads that one framing itself, and refuses anything else
(no ``Content-Length``, ``Transfer-Encoding``, a folded or malformed header, a
head over 16 KiB, a body over 64 MiB) as a daemon that did not answer
(exit 7). h11 with its dataclasses and typing would cost the thin client more
than Python's own start (SPEC.md, "Operators at scale": a light client); a
test holds this side and h11 to the same bytes both ways (tests/unit/daemon/test_transport.py).
Standard library only, and only ``_socket`` and ``json`` of it: the client's
cold path. ``_socket`` is the interpreter's built-in socket type that the
``socket`` module wraps; this side needs none of the wrapper's extras (file
objects, ``sendfile``, the enum-typed constants) and the wrapper with what it
loads (``selectors``, ``array``) is more than a tenth of the client's start.
"""

from __future__ import annotations

import _socket  # the built-in type behind the socket module (see above)
import json

from broker.vocab.errors import DaemonUnreachable

TYPE_CHECKING = False  # typing itself is not imported at run time: the client's cold path
if TYPE_CHECKING:
    from typing import Any

MAX_HEAD = 16 * 1024
MAX_ANSWER = 64 * 1024 * 1024


class Answer:
    """The daemon's answer: its status, JSON document, the exit code it asks for and the sessions left pending."""

    __slots__ = ("document", "exit_code", "incomplete", "status")

    def __init__(self, status: int, document: Any, exit_code: int, incomplete: tuple[str, ...] = ()) -> None:
        self.status = status
        self.document: Any = document
        self.exit_code = exit_code  # Broker-Exit-Code, or the error's exit_code, or 0
        self.incomplete = incomplete  # Broker-Incomplete: sessions a revoke left pending

    def __repr__(self) -> str:
        return f"Answer({self.status}, exit_code={self.exit_code})"


class Malformed(Exception):
    """The bytes are not an answer of the daemon's framing."""


def call(path: str, method: str, target: str, body: object = None) -> Answer:
    with Connection(path) as connection:
        return connection.request(method, target, body)


def request_bytes(method: str, target: str, body: object = None) -> bytes:
    """The request as sent: a JSON body (when there is one) with its length."""
    payload = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {target} HTTP/1.1\r\nhost: broker\r\ncontent-length: {len(payload)}\r\n"
    if body is not None:
        head += "content-type: application/json\r\n"
    return (head + "\r\n").encode("ascii") + payload


class Connection:
    """One kept connection to the daemon: several requests in turn (``exec`` holds its session on it)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        try:
            self.sock.connect(path)
        except OSError as exc:
            self.sock.close()
            raise DaemonUnreachable(f"cannot reach the broker daemon at {path} ({exc.strerror or exc})") from None
        self._buffer = b""
        self._closing = False  # the daemon said Connection: close

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def request(self, method: str, target: str, body: object = None) -> Answer:
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

    def send(self, method: str, target: str, body: object = None) -> None:
        try:
            if self._closing:
                raise ConnectionResetError("the daemon closed this connection")
            self.sock.sendall(request_bytes(method, target, body))
        except OSError as exc:
            raise self._broken(exc) from None

    def answer(self) -> Answer:
        try:
            return self._read_answer()
        except (OSError, Malformed) as exc:
            raise self._broken(exc) from None

    def done_sending(self) -> None:
        """Tell the daemon this side has nothing more to say (it still answers what was asked)."""
        try:  # contextlib would be one more import on the client's cold path
            self.sock.shutdown(_socket.SHUT_WR)
        except OSError:
            return

    def _broken(self, exc: Exception) -> DaemonUnreachable:
        return DaemonUnreachable(f"the broker daemon at {self.path} did not answer ({type(exc).__name__})")

    def _receive(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionResetError("closed before the answer ended")
        self._buffer += data

    def _read_answer(self) -> Answer:
        while b"\r\n\r\n" not in self._buffer:
            if len(self._buffer) > MAX_HEAD:
                raise Malformed("answer head too large")
            self._receive()
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        if len(head) > MAX_HEAD:
            raise Malformed("answer head too large")
        status, headers = parse_head(head)
        length = headers.get("content-length", "")
        if not length.isdigit() or len(length) > 12 or "transfer-encoding" in headers:
            raise Malformed("an answer without a Content-Length")
        size = int(length)
        if size > MAX_ANSWER:
            raise DaemonUnreachable("the broker daemon's answer is too large")
        while len(self._buffer) < size:
            self._receive()
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        self._closing = headers.get("connection", "").lower() == "close"
        return make_answer(status, headers, data)


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """Status and headers (lower-case names) of an answer head in the daemon's framing."""
    try:
        lines = head.decode("ascii").split("\r\n")
    except UnicodeDecodeError:
        raise Malformed("a non-ASCII answer head") from None
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if version != "HTTP/1.1" or not code.isdigit() or rest[3:4] not in ("", " ") or not 200 <= int(code) <= 599:
        raise Malformed("not an HTTP/1.1 status line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or not name.isprintable() or name.lower() in headers:
            raise Malformed("a malformed or repeated header")
        headers[name.lower()] = value.strip(" \t")
    return int(code), headers


def make_answer(status: int, headers: dict[str, str], data: bytes) -> Answer:
    try:
        document = json.loads(data)
    except ValueError:
        raise DaemonUnreachable(f"the broker daemon answered {status} without a JSON body") from None
    value = headers.get("broker-exit-code", "")
    exit_code = int(value) if value.isdigit() and len(value) < 4 else 0
    incomplete = tuple(headers["broker-incomplete"].split(",")) if headers.get("broker-incomplete") else ()
    if status >= 400 and isinstance(document, dict):
        code = document.get("exit_code")
        exit_code = code if isinstance(code, int) and 1 <= code <= 125 else 1
    return Answer(status, document, exit_code, incomplete)
