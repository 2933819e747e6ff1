"""The egress proxy with real sockets on loopback: curl, ``requests`` and raw clients through it.

An allowed destination is a real HTTP server; a refused one is a TCP
listener that counts the connections it accepts, so "nothing was sent
upstream" is checked where it matters: at the upstream. The one stand-in is
DNS (a fixed table), since no real name on this machine resolves to an
address the test controls.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from broker.egress.destinations import parse_destination
from broker.egress.proxy.listener import ProxyLimits, Resolver
from broker.egress.proxy.thread import ProxyThread, proxy_thread


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _reply(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.headers.get("Transfer-Encoding") == "chunked":
            body = b""
            while (size := int(self.rfile.readline().strip(), 16)) > 0:
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        self.server.requests.append(  # type: ignore[attr-defined]
            {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body.decode()}
        )
        answer = json.dumps({"path": self.path, "host": self.headers.get("Host"), "body": body.decode()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_POST = _reply

    def log_message(self, format: str, *args: object) -> None:
        return


@dataclass
class Upstream:
    port: int
    requests: list[dict[str, object]]


@dataclass
class Sink:
    """A listener that only counts: a refused destination must never see a connection."""

    port: int
    accepted: list[bytes] = field(default_factory=list)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Upstream(server.server_address[1], server.requests)  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def sink() -> Iterator[Sink]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    result = Sink(listener.getsockname()[1])
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(1)
            try:
                result.accepted.append(conn.recv(4096))
            except OSError:
                result.accepted.append(b"")
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield result
    finally:
        stop.set()
        thread.join()
        listener.close()


def table(mapping: dict[str, list[str]]) -> Resolver:
    """DNS as a fixed table: no real name here resolves to an address the test controls."""

    async def resolve(host: str, port: int) -> Sequence[str]:
        if host not in mapping:
            raise OSError("no such name")
        return mapping[host]

    return resolve


@contextlib.contextmanager
def proxy_for(*allow: str, **options: Any) -> Iterator[ProxyThread]:
    with proxy_thread(tuple(parse_destination(a) for a in allow), tcp=True, **options) as running:
        yield running


def curl(running: ProxyThread, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    proxy = f"http://127.0.0.1:{running.port}"
    return subprocess.run(
        ["curl", "-sS", "--max-time", "20", "-x", proxy, "-w", "\n%{http_code}", *extra, url],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )


def raw(running: ProxyThread, data: bytes, *, unix: bool = False) -> bytes:
    family = socket.AF_UNIX if unix else socket.AF_INET
    address: Any = str(running.socket_path) if unix else ("127.0.0.1", running.port)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(20)
        sock.connect(address)
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_curl_reaches_an_allowed_destination_by_plain_http(upstream: Upstream) -> None:
    with proxy_for(f"127.0.0.1:{upstream.port}") as running:
        result = curl(running, f"http://127.0.0.1:{upstream.port}/hello?x=1", "-H", "Proxy-Authorization: Basic eA==")
    body, status = result.stdout.rsplit("\n", 1)
    assert status == "200", result.stderr
    assert json.loads(body) == {"path": "/hello?x=1", "host": f"127.0.0.1:{upstream.port}", "body": ""}
    assert "proxy-authorization" not in upstream.requests[0]["headers"]  # type: ignore[operator]


def test_curl_reaches_an_allowed_destination_through_a_connect_tunnel(upstream: Upstream) -> None:
    with proxy_for(f"127.0.0.1:{upstream.port}") as running:
        result = curl(running, f"http://127.0.0.1:{upstream.port}/tunnel", "--proxytunnel")
    body, status = result.stdout.rsplit("\n", 1)
    assert status == "200", result.stderr
    assert json.loads(body)["path"] == "/tunnel"


def test_requests_posts_bodies_of_both_framings_through_it(upstream: Upstream) -> None:
    with proxy_for(f"127.0.0.1:{upstream.port}") as running:
        proxies = {"http": f"http://127.0.0.1:{running.port}"}
        url = f"http://127.0.0.1:{upstream.port}/post"
        sized = requests.post(url, data=b"x" * 100_000, proxies=proxies, timeout=20)
        chunked = requests.post(url, data=iter([b"ab", b"cd"]), proxies=proxies, timeout=20)
    assert sized.status_code == 200 and sized.json()["body"] == "x" * 100_000
    assert chunked.status_code == 200 and chunked.json()["body"] == "abcd"


def test_another_port_is_refused_with_403_and_the_upstream_sees_nothing(upstream: Upstream, sink: Sink) -> None:
    with proxy_for(f"127.0.0.1:{upstream.port}") as running:
        plain = curl(running, f"http://127.0.0.1:{sink.port}/")
        tunnel = curl(running, f"http://127.0.0.1:{sink.port}/", "--proxytunnel")
        again = curl(running, f"http://127.0.0.1:{sink.port}/again")
        denials = running.denials()
    assert plain.stdout.rsplit("\n", 1) == [
        f"broker egress proxy: egress to 127.0.0.1:{sink.port} is not allowed for this session\n",
        "403",
    ]
    assert tunnel.returncode != 0 and "403" in tunnel.stderr
    assert again.stdout.endswith("403")
    assert sink.accepted == []
    assert denials == {f"127.0.0.1:{sink.port}": 3}


def test_a_name_resolving_to_loopback_is_refused_unless_that_address_is_listed(sink: Sink) -> None:
    resolver = table({"internal.example.com": ["127.0.0.1"]})
    with proxy_for(f"internal.example.com:{sink.port}", resolver=resolver) as running:
        refused = curl(running, f"http://internal.example.com:{sink.port}/")
        tunnel = curl(running, f"http://internal.example.com:{sink.port}/", "--proxytunnel")
    assert refused.stdout.endswith("403") and tunnel.returncode != 0 and "403" in tunnel.stderr
    assert sink.accepted == []
    with proxy_for(f"internal.example.com:{sink.port}", f"127.0.0.1:{sink.port}", resolver=resolver) as running:
        request = f"GET http://internal.example.com:{sink.port}/x HTTP/1.1\r\nHost: elsewhere\r\n\r\n".encode()
        raw(running, request)
    assert len(sink.accepted) == 1
    assert sink.accepted[0].startswith(b"GET /x HTTP/1.1\r\nhost: internal.example.com:")


@pytest.mark.parametrize("answer", ["10.0.0.7", "169.254.169.254", "192.168.1.1", "::1", "fe80::1", "::ffff:127.0.0.1"])
def test_private_and_link_local_answers_are_refused_without_a_connection(answer: str) -> None:
    """The metadata service and the LAN are never reached through a name (nothing is connected at all)."""
    with proxy_for("metadata.example.com:80", resolver=table({"metadata.example.com": [answer]})) as running:
        reply = raw(running, b"GET http://metadata.example.com/ HTTP/1.1\r\nHost: x\r\n\r\n")
        denials = running.denials()
    assert reply.startswith(b"HTTP/1.1 403 ")
    assert denials == {"metadata.example.com:80": 1}


@pytest.mark.parametrize(
    "host",
    ["INTERNAL.example.com", "internal.example.com."],
)
def test_case_and_a_trailing_dot_do_not_change_the_decision(sink: Sink, host: str) -> None:
    resolver = table({"internal.example.com": ["127.0.0.1"]})
    with proxy_for(f"internal.example.com:{sink.port}", f"127.0.0.1:{sink.port}", resolver=resolver) as running:
        raw(running, f"CONNECT {host}:{sink.port} HTTP/1.1\r\nHost: x\r\n\r\nhello".encode())
    assert sink.accepted == [b"hello"]


@pytest.mark.parametrize(
    "request_",
    [
        b"GET /relative HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"GET https://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"GET http://user:pw@127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"CONNECT 127.0.0.1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"CONNECT ::1:{port} HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 20_000 + b"\r\n\r\n",
        b"GARBAGE\r\n\r\n",
    ],
)
def test_malformed_requests_get_400_and_nothing_upstream(sink: Sink, request_: bytes) -> None:
    with proxy_for(f"127.0.0.1:{sink.port}") as running:
        reply = raw(running, request_.replace(b"{port}", str(sink.port).encode()))
    assert reply.startswith(b"HTTP/1.1 400 "), reply[:100]
    assert sink.accepted == []


def test_the_unix_socket_serves_the_same_proxy(upstream: Upstream, sink: Sink) -> None:
    with proxy_for(f"127.0.0.1:{upstream.port}") as running:
        assert running.socket_path is not None and oct(running.socket_path.stat().st_mode)[-3:] == "600"
        ok = raw(running, f"GET http://127.0.0.1:{upstream.port}/u HTTP/1.1\r\nHost: x\r\n\r\n".encode(), unix=True)
        no = raw(running, f"GET http://127.0.0.1:{sink.port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode(), unix=True)
    assert ok.startswith(b"HTTP/1.1 200 ") and b'"path": "/u"' in ok
    assert no.startswith(b"HTTP/1.1 403 ")
    assert sink.accepted == []


def test_connections_are_bounded_per_session(upstream: Upstream) -> None:
    limits = ProxyLimits(max_connections=2)
    with proxy_for(f"127.0.0.1:{upstream.port}", limits=limits) as running:
        held = [socket.create_connection(("127.0.0.1", running.port or 0)) for _ in range(2)]
        try:
            for sock in held:  # the proxy has accepted both (it answers a third only once they count)
                sock.sendall(b"GET http://127.0.0.1:1/ HTTP/1.1\r\n")
            running.denials()
            reply = b""
            for _ in range(50):
                reply = raw(running, b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: x\r\n\r\n")
                if reply.startswith(b"HTTP/1.1 503 "):
                    break
            assert reply.startswith(b"HTTP/1.1 503 ")
        finally:
            for sock in held:
                sock.close()


def test_distinct_refused_destinations_are_bounded() -> None:
    with proxy_for("127.0.0.1:9", limits=ProxyLimits(max_denied_destinations=3)) as running:
        for port in range(10, 16):
            raw(running, f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        denials = running.denials()
    assert denials == {"127.0.0.1:10": 1, "127.0.0.1:11": 1, "127.0.0.1:12": 1, "(other destinations)": 3}


def test_a_refusing_proxy_answers_every_request_with_403_and_opens_nothing_upstream(sink: Sink) -> None:
    resolved: list[str] = []

    async def resolve(host: str, port: int) -> Sequence[str]:
        resolved.append(host)
        return ["127.0.0.1"]

    with proxy_for(f"127.0.0.1:{sink.port}", f"allowed.example.com:{sink.port}", resolver=resolve) as running:
        running.refuse()  # what a revocation does: open connections cut, every request from now on refused
        tunnel = raw(running, f"CONNECT 127.0.0.1:{sink.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        named = raw(running, f"CONNECT allowed.example.com:{sink.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        plain = curl(running, f"http://127.0.0.1:{sink.port}/")
    for answer in (tunnel, named):
        assert answer.startswith(b"HTTP/1.1 403 ") and b"this session has been revoked" in answer, answer
    assert plain.stdout.endswith("403") and "this session has been revoked" in plain.stdout
    assert sink.accepted == [] and resolved == []  # nothing upstream, not even a name looked up
