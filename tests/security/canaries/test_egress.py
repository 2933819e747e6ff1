"""Canaries through the egress proxy: the real token of ``inject: proxy`` never comes back to the client.

A credential host that echoes what it was sent (the ``Authorization`` value,
in a response header and in a body that arrives in pieces) must see its echo
masked back to the placeholder; the proxy's own refusals (403, 400, 502) and
its logs at DEBUG never repeat a canary token the client sent or the proxy held.
The upstream is a real local server behind a TLS front; DNS is a fixed table.
"""

from __future__ import annotations

import base64
import gzip
import logging
import re
import secrets
import ssl
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from broker.egress.destinations import parse_destination
from broker.egress.injectors.swap import Injection
from broker.egress.proxy.thread import proxy_thread
from broker.egress.terminate.ca import SessionCA, ca_bundle
from broker.egress.terminate.interceptor import Interceptor
from broker.vocab.secret import Secret
from providers.placeholders import placeholder_for
from tests.fixtures.tls import TLSFront, make_test_ca

ECHO = "echo.test"


class Echo(BaseHTTPRequestHandler):
    """Sends back the Authorization it got: in a header, and in a body written in small pieces."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        got = self.headers.get("Authorization", "")
        body = f'{{"you sent": "{got}", "again": "{got}"}}'.encode()
        if self.path == "/gzip":  # compressed though the proxy asked for no compression
            body = gzip.compress(body)
        self.send_response(401, f"refused {got}") if self.path == "/401" else self.send_response(200)
        if self.path == "/gzip":
            self.send_header("Content-Encoding", "gzip")
        self.send_header("X-Echo", got)
        self.send_header("WWW-Authenticate", f'Bearer realm="{got}"')
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for start in range(0, len(body), 7):  # pieces that cut the token apart
            piece = body[start : start + 7]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def echo_proxy(tmp_path: Path) -> Iterator[tuple[str, Secret, Secret, int, Path]]:
    token = Secret("ghs_CANARY" + secrets.token_hex(16))
    test_ca = make_test_ca(tmp_path, [ECHO])
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    front = TLSFront(test_ca.context, int(server.server_address[1]))
    ca = SessionCA([ECHO], datetime.now(UTC) + timedelta(minutes=20))
    interceptor = Interceptor(ca)
    placeholder = placeholder_for(token)
    interceptor.add(Injection(frozenset({(ECHO, front.port)}), placeholder, token, test_ca.cert_file))

    async def resolve(host: str, port: int) -> list[str]:
        if host != ECHO:
            raise OSError("no such name")
        return ["127.0.0.1"]

    bundle = tmp_path / "bundle.pem"
    system = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    bundle.write_bytes(ca_bundle(ca.pem, system.read_bytes() if system.exists() else b""))
    allow = (parse_destination(f"{ECHO}:{front.port}"), parse_destination(f"127.0.0.1:{front.port}"))
    try:
        with proxy_thread(allow, unix=False, tcp=True, resolver=resolve, interceptor=interceptor) as proxy:
            yield f"http://127.0.0.1:{proxy.port}", token, placeholder, front.port, bundle
    finally:
        front.close()
        server.shutdown()
        server.server_close()


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(("path", "scheme"), [("/", "bearer"), ("/401", "bearer"), ("/", "basic"), ("/401", "basic")])
def test_a_credential_host_echoing_the_token_gets_it_masked_in_headers_and_body(
    echo_proxy: tuple[str, Secret, Secret, int, Path], caplog: pytest.LogCaptureFixture, path: str, scheme: str
) -> None:
    proxy, token, placeholder, port, bundle = echo_proxy
    caplog.set_level(logging.DEBUG)
    sent = f"Bearer {placeholder.reveal()}" if scheme == "bearer" else _basic("x-access-token", placeholder.reveal())
    answer = requests.get(
        f"https://{ECHO}:{port}{path}",
        headers={"Authorization": sent},
        proxies={"https": proxy},
        verify=str(bundle),
        timeout=20,
    )
    assert answer.status_code == (401 if path == "/401" else 200)
    assert answer.json()["you sent"] == sent  # the echo came back, masked
    assert answer.headers["X-Echo"] == sent
    seen = "\n".join([answer.text, answer.reason, *(f"{k}: {v}" for k, v in answer.headers.items()), caplog.text])
    decoded = [base64.b64decode(word + "==", validate=False) for word in re.findall(r"[A-Za-z0-9+/]{20,}={0,2}", seen)]
    assert token.reveal() not in seen and all(token.reveal_bytes() not in d for d in decoded)


def test_a_compressed_answer_from_a_credential_host_is_refused_as_it_cannot_be_masked(
    echo_proxy: tuple[str, Secret, Secret, int, Path], caplog: pytest.LogCaptureFixture
) -> None:
    proxy, token, placeholder, port, bundle = echo_proxy
    caplog.set_level(logging.DEBUG)
    answer = requests.get(
        f"https://{ECHO}:{port}/gzip",
        headers={"Authorization": f"Bearer {placeholder.reveal()}"},
        proxies={"https": proxy},
        verify=str(bundle),
        timeout=20,
        stream=True,
    )
    raw = answer.raw.read(decode_content=False)
    assert answer.status_code == 502
    seen = "\n".join([gzip.decompress(raw).decode() if raw[:2] == b"\x1f\x8b" else raw.decode(), caplog.text])
    assert token.reveal() not in seen


@pytest.mark.parametrize(
    ("target", "status"),
    [
        ("https://elsewhere.test:443/", 403),  # not allowed: refused
        (f"https://{ECHO}:1/", 403),  # allowed host, other port
    ],
)
def test_refusals_and_their_logs_never_repeat_a_token_the_client_sent(
    echo_proxy: tuple[str, Secret, Secret, int, Path], caplog: pytest.LogCaptureFixture, target: str, status: int
) -> None:
    proxy, token, _, _, bundle = echo_proxy
    caplog.set_level(logging.DEBUG)
    with pytest.raises(requests.exceptions.ProxyError) as refused:
        requests.get(
            target,
            headers={"Authorization": f"Bearer {token.reveal()}"},
            proxies={"https": proxy},
            verify=str(bundle),
            timeout=20,
        )
    assert str(status) in str(refused.value)
    plain = requests.get(
        target.replace("https", "http"),
        headers={"Authorization": f"Bearer {token.reveal()}", "Proxy-Authorization": f"Basic {token.reveal()}"},
        proxies={"http": proxy},
        timeout=20,
    )
    assert plain.status_code in (400, 403, 502)
    seen = "\n".join([str(refused.value), plain.text, *plain.headers.values(), caplog.text])
    assert token.reveal() not in seen
