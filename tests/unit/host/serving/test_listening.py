"""The one accept loop: its limits are parameters, a connection over them is refused at once, nothing waits."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.host.serving.listening import Acceptor, Limits, Refusals

pytestmark = pytest.mark.unit


class Loop:
    """An acceptor on a Unix socket whose peers name themselves by their first byte (the key it counts)."""

    def __init__(self, path: Path, limits: Limits, admit_all: bool = True) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(16)
        self.path = path
        self.release = threading.Event()
        self.served: list[str] = []
        self.refused: list[str] = []
        self.acceptor: Acceptor[str] = Acceptor(
            self.listener,
            identify=lambda connection: connection.recv(1).decode(),
            key=lambda peer: peer,
            admit=None if admit_all else (lambda connection, peer: peer != "x"),
            serve=self._serve,
            refuse=self._refuse,
            limits=limits,
            stopping=threading.Event(),
            refusals=Refusals(peer=lambda peer, held: f"{peer} holds {held}", full="full"),
        )

    def _serve(self, connection: socket.socket, peer: str) -> None:
        self.served.append(peer)
        connection.sendall(b"ok")
        self.release.wait(10)

    def _refuse(self, connection: socket.socket, why: str) -> None:
        self.refused.append(why)
        connection.sendall(why.encode())
        connection.close()

    def connect(self, peer: str) -> bytes:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(5)
        client.connect(str(self.path))
        client.sendall(peer.encode())
        self.clients.append(client)
        return client.recv(100)

    clients: list[socket.socket] = []


@pytest.fixture
def loop(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Loop]:
    limits, admit_all = request.param
    running = Loop(tmp_path / "s.sock", limits, admit_all)
    running.clients = []
    thread = running.acceptor.start("test-accept")
    yield running
    running.release.set()
    running.acceptor.stop()
    thread.join(10)
    for client in running.clients:
        client.close()
    assert not thread.is_alive()


@pytest.mark.parametrize("loop", [(Limits(total=3, per_peer=2, exempt=lambda peer: peer == "r"), True)], indirect=True)
def test_a_peer_past_its_limit_and_a_full_listener_are_refused_at_once_and_an_exempt_peer_is_always_served(
    loop: Loop,
) -> None:
    assert loop.connect("a") == b"ok"
    assert loop.connect("a") == b"ok"
    assert loop.connect("a") == b"a holds 2"  # its own limit
    assert loop.connect("b") == b"ok"
    assert loop.connect("c") == b"full"  # three held in all
    assert loop.connect("r") == b"ok"  # exempt: served, not counted
    assert loop.served == ["a", "a", "b", "r"]
    assert loop.refused == ["a holds 2", "full"]


@pytest.mark.parametrize("loop", [(Limits(total=1), True)], indirect=True)
def test_a_connection_that_ended_is_counted_out(loop: Loop) -> None:
    loop.release.set()  # each connection ends as soon as it is answered
    for _ in range(3):
        assert loop.connect("a") == b"ok"
        loop.acceptor.join()


@pytest.mark.parametrize("loop", [(Limits(total=4), False)], indirect=True)
def test_a_peer_admit_turns_away_is_closed_and_never_served(loop: Loop) -> None:
    assert loop.connect("x") == b""  # closed unanswered
    assert loop.connect("a") == b"ok"
    assert loop.served == ["a"]
