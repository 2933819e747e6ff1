"""The gateway's listener on its own: its own routes, its answers before a session is known, its limits.

A ``Gateway`` on loopback (no TLS, as loopback allows) with no session: the
paths registered for the gateway's own host answer a plain GET (and HEAD)
without any proxy credential, what is not registered is 404, a proxy request
without a credential is 407, a malformed head is 400, and a connection over
``max_connections`` is closed at once while the others are served.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator

import pytest

from broker.egress.gateway.listener import Gateway, Page
from broker.egress.gateway.passes import Address


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    running = Gateway(("127.0.0.1", 0), Address("http", "127.0.0.1", 0), None, max_connections=4)
    try:
        yield running
    finally:
        running.close()


def get(gateway: Gateway, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    try:
        connection.request(method, path)
        answer = connection.getresponse()
        return answer.status, {name.lower(): value for name, value in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def test_the_gateways_own_routes_answer_without_a_credential(gateway: Gateway) -> None:
    document = json.dumps({"issuer": "https://gateway.example:3128"}).encode()
    gateway.route("/.well-known/openid-configuration", lambda: Page(200, "application/json", document))
    status, headers, body = get(gateway, "GET", "/.well-known/openid-configuration?x=1")
    assert (status, headers["content-type"], body) == (200, "application/json", document)
    status, headers, body = get(gateway, "HEAD", "/.well-known/openid-configuration")
    assert (status, headers["content-length"], body) == (200, str(len(document)), b"")
    assert get(gateway, "GET", "/.well-known/jwks.json")[0] == 404
    assert get(gateway, "POST", "/.well-known/openid-configuration")[0] == 404  # GET and HEAD only
    with pytest.raises(ValueError):
        gateway.route("relative", lambda: Page(200, "text/plain", b""))


def test_a_proxy_request_without_a_credential_and_a_malformed_head(gateway: Gateway) -> None:
    status, headers, _ = get(gateway, "GET", "http://api.example/x")
    assert status == 407 and headers["proxy-authenticate"] == 'Basic realm="broker gateway"'
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 400")


def test_connections_past_the_limit_are_closed_and_the_rest_served(gateway: Gateway) -> None:
    gateway.route("/ping", lambda: Page(200, "text/plain", b"pong"))
    held = [socket.create_connection(("127.0.0.1", gateway.port), timeout=10) for _ in range(4)]
    try:
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as extra:
            try:
                extra.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
                answered = extra.recv(100)
            except ConnectionResetError:
                answered = b""
            assert answered == b""  # closed at once, unanswered: the four held are the limit
    finally:
        for sock in held:
            sock.close()
    status = 0
    for _ in range(50):  # the held ones are counted out as they close
        try:
            status = get(gateway, "GET", "/ping")[0]
        except OSError:
            time.sleep(0.1)
            continue
        break
    assert status == 200
