"""The client's side of the daemon's HTTP: the same bytes as h11 both ways, and nothing else accepted.

The daemon parses requests with h11 (``broker.host.serving.wire``); the thin client
writes them and reads the daemon's answers without it (``broker.daemon.transport``,
a light client). h11 is the oracle here: what the client writes, h11's server
side reads as the same request; what h11 writes the way ``wire`` answers, the
client reads as the same answer. Anything outside that framing is a daemon
that did not answer (exit 7), never a traceback.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import h11
import pytest

from broker.daemon.transport import Connection, call, request_bytes
from broker.vocab.errors import DaemonUnreachable


@pytest.mark.parametrize(
    ("method", "target", "body"),
    [("GET", "/v1/sessions?all=1", None), ("POST", "/v1/sessions", {"task": "fix-1", "x": ["é", 1]}),
     ("DELETE", "/v1/sessions/s-aaaaaaaaaaaa", None)],
)  # fmt: skip
def test_h11_reads_the_clients_request_as_sent(method: str, target: str, body: object) -> None:
    server = h11.Connection(h11.SERVER)
    server.receive_data(request_bytes(method, target, body))
    head = server.next_event()
    assert isinstance(head, h11.Request)
    assert (head.method.decode(), head.target.decode()) == (method, target)
    data = server.next_event()
    received = data.data if isinstance(data, h11.Data) else b""
    assert json.loads(received) == body if body is not None else received == b""
    assert isinstance(server.next_event() if received else data, h11.EndOfMessage)


def wire_answer(status: int, document: object, headers: list[tuple[str, str]] = ()) -> bytes:  # type: ignore[assignment]
    """An answer as ``broker.host.serving.wire`` writes it: through h11's server side."""
    server = h11.Connection(h11.SERVER)
    server.receive_data(b"GET / HTTP/1.1\r\nhost: broker\r\n\r\n")
    server.next_event()
    server.next_event()
    body = json.dumps(document, indent=2).encode() + b"\n"
    all_headers = [("content-type", "application/json"), ("content-length", str(len(body))), *headers]
    data = server.send(h11.Response(status_code=status, headers=all_headers)) or b""
    data += server.send(h11.Data(data=body)) or b""
    return data + (server.send(h11.EndOfMessage()) or b"")


def serving(path: Path, chunks: list[bytes], requests: int = 1) -> threading.Thread:
    """A one-connection server at ``path`` that reads ``requests`` requests, writes ``chunks`` one by one, closes."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def serve() -> None:
        connection, _ = listener.accept()
        with connection, listener:
            received = b""
            while received.count(b" HTTP/1.1\r\n") < requests:
                received += connection.recv(65536)
            for chunk in chunks:
                connection.sendall(chunk)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_the_client_reads_the_daemons_answer_as_h11_wrote_it(tmp_path: Path) -> None:
    document = {"session": "s-aaaaaaaaaaaa", "credentials": [{"name": "kv", "outcome": "pending"}]}
    raw = wire_answer(200, document, [("broker-exit-code", "5"), ("broker-incomplete", "s-a,s-b")])
    serving(tmp_path / "s", [raw[:7], raw[7:40], raw[40:]])  # split anywhere: read whole
    answer = call(str(tmp_path / "s"), "DELETE", "/v1/sessions/s-aaaaaaaaaaaa")
    assert (answer.status, answer.document, answer.exit_code, answer.incomplete) == (
        200, document, 5, ("s-a", "s-b"),
    )  # fmt: skip


def test_an_error_answer_carries_its_exit_code(tmp_path: Path) -> None:
    serving(tmp_path / "s", [wire_answer(403, {"error": "denied by policy", "exit_code": 3})])
    answer = call(str(tmp_path / "s"), "POST", "/v1/sessions", {"version": 1})
    assert (answer.status, answer.exit_code, answer.document["error"]) == (403, 3, "denied by policy")


def test_two_answers_on_one_connection_in_turn(tmp_path: Path) -> None:
    serving(tmp_path / "s", [wire_answer(200, {"one": 1}) + wire_answer(200, {"two": 2})], requests=2)
    with Connection(str(tmp_path / "s")) as connection:
        connection.send("POST", "/v1/exec", {})
        connection.send("POST", "/v1/sessions/s-aaaaaaaaaaaa/hold")  # both answers come in one read
        assert connection.answer().document == {"one": 1}
        assert connection.answer().document == {"two": 2}


HOSTILE = {
    "no length": b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{}",
    "chunked": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "folded": b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n x: folded\r\n\r\n{}",
    "two lengths": b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n{}",
    "signed length": b"HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\n{}",
    "informational": b"HTTP/1.1 100 Continue\r\ncontent-length: 2\r\n\r\n{}",
    "http/1.0": b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n{}",
    "not http": b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    "binary head": b"HTTP/1.1 200 \xff\r\ncontent-length: 2\r\n\r\n{}",
    "endless head": b"HTTP/1.1 200 OK\r\n" + b"x-filler: " + b"a" * 70000,
    "short body": b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}",
    "huge body": b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999\r\n\r\n{}",
    "not json": b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nnope",
    "closed at once": b"",
}


@pytest.mark.parametrize("raw", HOSTILE.values(), ids=HOSTILE.keys())
def test_anything_but_the_daemons_framing_is_a_daemon_that_did_not_answer(tmp_path: Path, raw: bytes) -> None:
    serving(tmp_path / "s", [raw])
    with pytest.raises(DaemonUnreachable) as raised:
        call(str(tmp_path / "s"), "GET", "/v1/sessions")
    assert raised.value.exit_code == 7 and "\n" not in raised.value.message


def test_after_connection_close_the_client_sends_nothing_more(tmp_path: Path) -> None:
    serving(tmp_path / "s", [wire_answer(200, {}, [("connection", "close")])])
    with Connection(str(tmp_path / "s")) as connection:
        assert connection.request("GET", "/v1/sessions").document == {}
        with pytest.raises(DaemonUnreachable):
            connection.request("GET", "/v1/sessions")
