"""CONNECT tunnels copied by the kernel: bytes intact both ways, half-close, teardown, the connection limit.

Real sockets on loopback: a raw client opens a tunnel through the proxy to a
TCP server the test scripts, so each end can be observed where it matters.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest

from broker.egress.destinations import parse_destination
from broker.egress.proxy import splice
from broker.egress.proxy.listener import ProxyLimits
from broker.egress.proxy.thread import ProxyThread, proxy_thread

Script = Callable[[socket.socket], None]


@contextlib.contextmanager
def server(script: Script) -> Iterator[int]:
    """A TCP server running ``script`` on each connection it accepts, in a thread of its own."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    threads: list[threading.Thread] = []

    def run(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(20)
            script(conn)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=run, args=(conn,), daemon=True)
            thread.start()
            threads.append(thread)

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        acceptor.join()
        for thread in threads:
            thread.join(timeout=20)


@contextlib.contextmanager
def proxy_to(port: int, limits: ProxyLimits | None = None) -> Iterator[ProxyThread]:
    with proxy_thread((parse_destination(f"127.0.0.1:{port}"),), tcp=True, limits=limits) as running:
        yield running


def open_tunnel(
    running: ProxyThread, port: int, early: bytes = b"", *, unix: bool = False
) -> tuple[socket.socket, bytes]:
    """A client socket with its tunnel open (``early`` sent in the same write as the CONNECT) and the reply head."""
    if unix:  # the way the sandbox reaches the proxy
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(20)
        sock.connect(str(running.socket_path))
    else:
        sock = socket.create_connection(("127.0.0.1", running.port or 0), timeout=20)
    sock.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode() + early)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            break
        head += chunk
    return sock, head


def read_all(sock: socket.socket) -> bytes:
    received = bytearray()
    while chunk := sock.recv(1 << 16):
        received += chunk
    return bytes(received)


def reset(sock: socket.socket) -> None:
    """Close with a reset rather than a FIN: the abrupt end of a connection."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
def test_bytes_cross_intact_both_ways_and_a_half_close_passes_on(unix: bool) -> None:
    upload, download = os.urandom(3 << 20), os.urandom(5 << 20)
    seen: list[bytes] = []

    def script(conn: socket.socket) -> None:
        seen.append(read_all(conn))  # ends only once the client's half-close has passed through
        conn.sendall(download)

    with server(script) as port, proxy_to(port) as running:
        sock, head = open_tunnel(running, port, early=upload[:1000], unix=unix)
        with sock:
            sock.sendall(upload[1000:])
            sock.shutdown(socket.SHUT_WR)
            answer = read_all(sock)
    assert head.startswith(b"HTTP/1.1 200 ")
    assert hashlib.sha256(seen[0]).digest() == hashlib.sha256(upload).digest()
    assert hashlib.sha256(answer).digest() == hashlib.sha256(download).digest()


class RecordingBudget(splice._Budget):
    """The process's budget for enlarged pipes, counting how often a direction got to grow its pipe."""

    def __init__(self, total: int) -> None:
        super().__init__(total)
        self.total = total
        self.grown = 0

    def take(self, size: int) -> bool:
        granted = super().take(size)
        self.grown += granted
        return granted

    def spare(self) -> int:
        with self._lock:
            return self._spare


@pytest.mark.parametrize("room", [0, 1], ids=["spent", "one-pipe"])
def test_busy_directions_grow_their_pipes_within_the_budget_and_give_it_back(
    monkeypatch: pytest.MonkeyPatch, room: int
) -> None:
    """Upload, then download: with room for one enlarged pipe each direction gets it in turn; with none, neither."""
    budget = RecordingBudget(room * splice.BULK_PIPE)
    monkeypatch.setattr(splice, "_BUDGET", budget)
    upload, download = os.urandom(4 << 20), os.urandom(4 << 20)
    seen: list[bytes] = []

    def script(conn: socket.socket) -> None:
        seen.append(read_all(conn))
        conn.sendall(download)

    with server(script) as port, proxy_to(port) as running:
        sock, head = open_tunnel(running, port)
        with sock:
            sock.sendall(upload)
            sock.shutdown(socket.SHUT_WR)
            answer = read_all(sock)
    assert head.startswith(b"HTTP/1.1 200 ")
    assert hashlib.sha256(seen[0]).digest() == hashlib.sha256(upload).digest()
    assert hashlib.sha256(answer).digest() == hashlib.sha256(download).digest()
    assert budget.grown == 2 * room
    assert budget.spare() == budget.total


def test_the_upstream_half_closing_first_still_lets_the_client_finish() -> None:
    seen: list[bytes] = []
    heard = threading.Event()

    def script(conn: socket.socket) -> None:
        conn.sendall(b"greeting")
        conn.shutdown(socket.SHUT_WR)
        seen.append(read_all(conn))
        heard.set()

    with server(script) as port, proxy_to(port) as running:
        sock, _ = open_tunnel(running, port)
        with sock:
            greeting = read_all(sock)  # the upstream's FIN arrived ...
            sock.sendall(b"still heard")  # ... and the other direction still carries
            sock.shutdown(socket.SHUT_WR)
            assert heard.wait(20)
    assert greeting == b"greeting"
    assert seen == [b"still heard"]


@pytest.mark.parametrize("side", ["client", "upstream"])
def test_a_tunnel_reset_by_either_side_tears_down_the_other(side: str) -> None:
    ends: list[bytes] = []
    upstream_ready = threading.Event()
    upstream_may_reset = threading.Event()

    def script(conn: socket.socket) -> None:
        upstream_ready.set()
        if side == "upstream":
            upstream_may_reset.wait(20)
            reset(conn)
            return
        try:
            ends.append(read_all(conn))  # nothing but the end of the tunnel ever arrives
        except ConnectionResetError:
            ends.append(b"reset")

    with server(script) as port, proxy_to(port) as running:
        sock, head = open_tunnel(running, port)
        assert head.startswith(b"HTTP/1.1 200 ") and upstream_ready.wait(20)
        if side == "client":
            reset(sock)
        else:
            upstream_may_reset.set()
            with sock:
                try:
                    ends.append(read_all(sock))
                except ConnectionResetError:
                    ends.append(b"reset")
        for _ in range(200):  # the proxy lets go of the tunnel once both directions have ended
            if running.proxy.active == 0:
                break
            threading.Event().wait(0.05)
        assert running.proxy.active == 0
    assert ends in ([b""], [b"reset"])


def test_open_tunnels_count_against_the_connection_limit_and_release_it() -> None:
    release = threading.Event()

    def script(conn: socket.socket) -> None:
        release.wait(20)

    with server(script) as port, proxy_to(port, limits=ProxyLimits(max_connections=2)) as running:
        held = [open_tunnel(running, port) for _ in range(2)]
        try:
            assert all(head.startswith(b"HTTP/1.1 200 ") for _, head in held)
            third, refused = open_tunnel(running, port)
            third.close()
            assert refused.startswith(b"HTTP/1.1 503 ")
        finally:
            release.set()
            for sock, _ in held:
                sock.close()
        reopened = b""
        for _ in range(200):  # once the held tunnels are gone, a new one is let in
            sock, reopened = open_tunnel(running, port)
            sock.close()
            if reopened.startswith(b"HTTP/1.1 200 "):
                break
            threading.Event().wait(0.05)
        assert reopened.startswith(b"HTTP/1.1 200 ")


def test_stopping_the_proxy_tears_down_its_open_tunnels() -> None:
    ends: list[bytes] = []
    upstream_ready = threading.Event()

    def script(conn: socket.socket) -> None:
        upstream_ready.set()
        try:
            ends.append(read_all(conn))
        except ConnectionResetError:
            ends.append(b"reset")

    with server(script) as port:
        with proxy_to(port) as running:
            sock, head = open_tunnel(running, port)
            assert head.startswith(b"HTTP/1.1 200 ") and upstream_ready.wait(20)
        with sock:
            client_end = read_all(sock)
    assert client_end == b""
    assert ends in ([b""], [b"reset"])
