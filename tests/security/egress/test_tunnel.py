"""Inside an intercepted tunnel: a request goes to the host it was checked for, and Vault wraps nothing for it.

The upstream is a real server behind a TLS front (``tests/fixtures/tls.py``)
that records every request it gets, as a front routing by ``Host`` would see
it: which virtual host it names and which credential it carries. It stands
for a GitHub API host, a Vault host (answering as Vault does, with a
``wrap_info`` when a path asks for one) and an IPv6 literal host. The client
side is a raw socket (CONNECT, then TLS with the session CA), so each request
head is exactly what the test writes; DNS is a fixed table.
"""

from __future__ import annotations

import json
import secrets
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from broker.egress.destinations import parse_destination
from broker.egress.exchange.refusals import Refusal, RefusedRequest
from broker.egress.injectors.swap import Injection
from broker.egress.proxy.listener import ProxyLimits
from broker.egress.proxy.thread import ProxyThread, proxy_thread
from broker.egress.terminate.ca import SessionCA
from broker.egress.terminate.guards import parse_host_header, tunnel_authority
from broker.egress.terminate.interceptor import Interceptor
from broker.vocab.secret import Secret
from providers.placeholders import placeholder_for
from tests.fixtures.openbao import VAULT_GUARD, VAULT_HEADERS
from tests.fixtures.tls import TLSFront, make_test_ca

API, VAULT, OTHER, V6 = "api.github.test", "vault.test", "other.test", "::1"
WRAPPING_TOKEN = "hvs.CAESIWRAPPING" + "w" * 80
WRAPPED = {
    "request_id": "",
    "lease_id": "",
    "renewable": False,
    "lease_duration": 0,
    "data": None,
    "wrap_info": {
        "token": WRAPPING_TOKEN,
        "accessor": "wrapping-accessor",
        "ttl": 300,
        "creation_time": "2025-01-01T00:00:00Z",
        "creation_path": "auth/token/lookup-self",
    },
    "warnings": None,
    "auth": None,
}
BIG = 1024 * 1024 + 1


class Recording(BaseHTTPRequestHandler):
    """Records each request (its headers in order, names in lower case, repeated ones too) and answers by path."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.server.seen.append({"path": self.path, "headers": [(k.lower(), v) for k, v in self.headers.items()]})  # type: ignore[attr-defined]
        content_type, body = "application/json", json.dumps({"host": self.headers.get("Host")}).encode()
        if self.path.startswith("/wrapped"):
            body = json.dumps(WRAPPED).encode()
        if self.path == "/wrapped-charset":
            content_type = "application/json; charset=utf-8"
        if self.path == "/wrapped-twice":  # duplicate keys: a reader keeping the last one sees null
            body = body[:-1] + b', "wrap_info": null}'
        if self.path == "/nested":  # a secret whose own data says wrap_info: not Vault's envelope
            body = json.dumps({"data": {"wrap_info": {"token": "kept"}}, "wrap_info": None}).encode()
        if self.path == "/big-json":
            body = json.dumps({"data": {"blob": "x" * BIG}, "wrap_info": None}).encode()
        if self.path == "/big-pem":
            content_type, body = "application/pem-certificate-chain", b"-" * BIG
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        if self.path == "/wrapped-chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(body), 13):
                piece = body[start : start + 13]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@dataclass
class Tunnels:
    proxy: ProxyThread
    ports: dict[str, int]
    seen: list[dict[str, object]]
    token: Secret
    placeholder: Secret
    session_ca: Path
    upstream_ca: Path

    def authority(self, host: str) -> str:
        return f"[{host}]:{self.ports[host]}" if ":" in host else f"{host}:{self.ports[host]}"

    def exchange(self, connect: str, head: bytes, server_name: str | None = None) -> tuple[int, bytes]:
        """CONNECT ``connect`` through the proxy, TLS with the session CA, send ``head``; the status and body."""
        assert self.proxy.port is not None
        with socket.create_connection(("127.0.0.1", self.proxy.port), timeout=20) as raw:
            raw.sendall(f"CONNECT {connect} HTTP/1.1\r\nHost: {connect}\r\n\r\n".encode())
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += raw.recv(4096) or b"\r\n\r\n"
            assert answer.startswith(b"HTTP/1.1 200"), answer
            context = ssl.create_default_context(cafile=str(self.session_ca))
            name = server_name or connect.rpartition(":")[0].strip("[]")
            with context.wrap_socket(raw, server_hostname=name) as tls:
                tls.sendall(head)
                received = b""
                while chunk := tls.recv(65536):
                    received += chunk
        status_line, _, rest = received.partition(b"\r\n")
        return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]

    def refused(self) -> dict[RefusedRequest, int]:
        return {key: count for key, count in self.proxy.denials().items() if isinstance(key, RefusedRequest)}

    def hosts_seen(self) -> list[str]:
        return [value for request in self.seen for name, value in request["headers"] if name == "host"]  # type: ignore[attr-defined]


@pytest.fixture
def tunnels(tmp_path: Path) -> Iterator[Tunnels]:
    test_ca = make_test_ca(tmp_path, [API, VAULT, OTHER])
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    server.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    backend = int(server.server_address[1])
    fronts = {name: TLSFront(test_ca.context, backend) for name in (API, VAULT, OTHER)}
    fronts[V6] = TLSFront(test_ca.context, backend, host=V6)
    ports = {name: front.port for name, front in fronts.items()}
    token = Secret("hvs.CAESIREAL" + secrets.token_hex(24))
    placeholder = placeholder_for(token)
    interceptor = Interceptor(SessionCA([API, VAULT, V6], datetime.now(UTC) + timedelta(minutes=20)))
    ca_file = test_ca.cert_file
    interceptor.add(Injection(frozenset({(API, ports[API]), (V6, ports[V6])}), placeholder, token, ca_file))
    interceptor.add(
        Injection(frozenset({(VAULT, ports[VAULT])}), placeholder, token, ca_file, VAULT_HEADERS, VAULT_GUARD)
    )
    session_ca = tmp_path / "session-ca.pem"
    session_ca.write_bytes(interceptor.ca.pem)
    allow = tuple(parse_destination(f"{name}:{port}") for name, port in ports.items() if name != V6)
    allow += tuple(parse_destination(f"127.0.0.1:{port}") for name, port in ports.items() if name != V6)
    allow += (parse_destination(f"[{V6}]:{ports[V6]}"), parse_destination(f"{API}:80"))

    async def resolve(host: str, port: int) -> list[str]:
        if host not in ports:
            raise OSError("no such name")
        return ["127.0.0.1"]

    try:
        with proxy_thread(allow, unix=False, tcp=True, resolver=resolve, interceptor=interceptor) as proxy:
            yield Tunnels(proxy, ports, server.seen, token, placeholder, session_ca, ca_file)  # type: ignore[attr-defined]
    finally:
        for front in fronts.values():
            front.close()
        server.shutdown()
        server.server_close()


def _get(path: str, *headers: str, version: str = "1.1") -> bytes:
    """One request that asks for the connection to close after its answer (the tunnel keeps it open otherwise)."""
    lines = [*headers, "Connection: close"]
    return f"GET {path} HTTP/{version}\r\n".encode() + b"".join(f"{h}\r\n".encode() for h in lines) + b"\r\n"


@pytest.mark.parametrize(
    "host_lines",
    [
        pytest.param(["Host: other.test"], id="another-vhost"),
        pytest.param(["Host: other.test:{port}"], id="another-vhost-same-port"),
        pytest.param(["Host: api.github.test:1"], id="another-port"),
        pytest.param(["Host: api.github.test"], id="port-left-out-means-443"),
        pytest.param(["Host: "], id="empty"),
        pytest.param(["Host: api.github.test:{port}, other.test"], id="a-list"),
        pytest.param(["Host: x@other.test:{port}"], id="userinfo"),
        pytest.param(["Host: api.github.test:{port}/"], id="trailing-slash"),
        pytest.param(["Host: api.github.test..:{port}"], id="two-trailing-dots"),
        pytest.param(["Host: api.github.test:0{port}"], id="port-leading-zero"),
        pytest.param(["Host: api.github.test:{port}", "X-Forwarded-Host: other.test"], id="x-forwarded-host"),
        pytest.param(["Host: api.github.test:{port}", "Forwarded: host=other.test"], id="forwarded"),
        pytest.param(["Host: api.github.test:{port}", "X-Host: other.test"], id="x-host"),
    ],
)
def test_a_request_naming_another_host_inside_the_tunnel_is_refused_and_nothing_goes_upstream(
    tunnels: Tunnels, host_lines: list[str]
) -> None:
    port = tunnels.ports[API]
    lines = [line.format(port=port) for line in host_lines]
    status, body = tunnels.exchange(
        tunnels.authority(API), _get("/user", *lines, f"Authorization: token {tunnels.placeholder.reveal()}")
    )
    assert status == 400, body
    assert f"exactly one Host header, {API}:{port}".encode() in body or b"names no other host" in body
    assert tunnels.seen == []  # no virtual host got the request, let alone the token
    assert tunnels.refused() == {RefusedRequest(f"{API}:{port}", Refusal.HOST): 1}


@pytest.mark.parametrize(
    ("head", "why"),
    [
        pytest.param(_get("/user", version="1.0"), Refusal.HOST, id="http-1.0-without-host"),
        pytest.param(_get("/user", "Host: api.github.test:{port}", "Host: other.test"), Refusal.MALFORMED, id="two"),
        pytest.param(_get("https://other.test/user", "Host: api.github.test:{port}"), Refusal.TARGET, id="absolute"),
        pytest.param(b"OPTIONS * HTTP/1.1\r\nHost: api.github.test:{port}\r\n\r\n", Refusal.TARGET, id="asterisk"),
    ],
)
def test_a_request_without_a_host_or_with_another_target_form_is_refused(
    tunnels: Tunnels, head: bytes, why: Refusal
) -> None:
    port = tunnels.ports[API]
    status, body = tunnels.exchange(tunnels.authority(API), head.replace(b"{port}", str(port).encode()))
    assert status == 400, body
    assert tunnels.seen == []
    assert tunnels.refused() == {RefusedRequest(f"{API}:{port}", why): 1}


@pytest.mark.parametrize(
    ("connect", "host_line"),
    [
        pytest.param("api.github.test:{port}", "Host: API.GitHub.Test.:{port}", id="upper-case-trailing-dot"),
        pytest.param("API.GITHUB.TEST.:{port}", "Host: api.github.test:{port}", id="connect-in-another-spelling"),
    ],
)
def test_the_same_authority_in_another_spelling_passes_and_upstream_gets_its_canonical_form(
    tunnels: Tunnels, connect: str, host_line: str
) -> None:
    port = tunnels.ports[API]
    head = _get("/user", host_line.format(port=port), f"Authorization: Bearer {tunnels.placeholder.reveal()}")
    status, body = tunnels.exchange(connect.format(port=port), head, server_name=API)
    assert status == 200, body
    [request] = tunnels.seen
    assert tunnels.hosts_seen() == [f"{API}:{port}"]
    assert ("authorization", f"Bearer {tunnels.token.reveal()}") in request["headers"]  # type: ignore[operator]
    assert tunnels.refused() == {}


@pytest.mark.parametrize(
    ("host_line", "status"),
    [
        pytest.param("Host: [::1]:{port}", 200, id="canonical"),
        pytest.param("Host: [0:0::1]:{port}", 200, id="same-address-longer"),
        pytest.param("Host: [::2]:{port}", 400, id="another-address"),
        pytest.param("Host: ::1:{port}", 400, id="without-brackets"),
        pytest.param("Host: [::1%lo]:{port}", 400, id="zone-id"),
        pytest.param("Host: 127.0.0.1:{port}", 400, id="another-family"),
    ],
)
def test_an_ipv6_literal_credential_host_takes_only_its_own_address(
    tunnels: Tunnels, host_line: str, status: int
) -> None:
    port = tunnels.ports[V6]
    head = _get("/user", host_line.format(port=port), f"Authorization: token {tunnels.placeholder.reveal()}")
    answered, body = tunnels.exchange(f"[::1]:{port}", head)
    assert answered == status, body
    assert tunnels.hosts_seen() == ([f"[::1]:{port}"] if status == 200 else [])


def test_the_host_header_s_canonical_form_elides_only_the_https_port() -> None:
    assert parse_host_header(b"Vault.Test.") == parse_host_header(b"vault.test:443") == ("vault.test", 443)
    assert tunnel_authority("vault.test", 443) == b"vault.test"
    assert tunnel_authority("vault.test", 8200) == b"vault.test:8200"
    assert tunnel_authority("::1", 443) == b"[::1]"
    assert parse_host_header(b"[::1]") == ("::1", 443)
    for bad in (b"", b":443", b"vault.test:", b"vault.test:65536", b"vault.test:+1", b"[::1", b"vault.t\xc3\xa9st"):
        assert parse_host_header(bad) is None, bad


def test_vault_s_wrapping_headers_never_reach_vault(tunnels: Tunnels) -> None:
    port = tunnels.ports[VAULT]
    head = _get(
        "/v1/auth/token/lookup-self",
        f"Host: {VAULT}:{port}",
        f"X-Vault-Token: {tunnels.placeholder.reveal()}",
        "X-Vault-Wrap-TTL: 300",
        "X-VAULT-WRAP-FORMAT: jwt",
        "x-vault-wrap-ttl: 5m",
        "X_Vault_Wrap_TTL: 300",
    )
    status, body = tunnels.exchange(tunnels.authority(VAULT), head)
    assert status == 200, body
    [request] = tunnels.seen
    names = [name.replace("_", "-") for name, _ in request["headers"]]  # type: ignore[attr-defined]
    assert "x-vault-wrap-ttl" not in names and "x-vault-wrap-format" not in names
    assert ("x-vault-token", tunnels.token.reveal()) in request["headers"]  # type: ignore[operator]


@pytest.mark.parametrize("path", ["/wrapped", "/wrapped-chunked", "/wrapped-charset", "/wrapped-twice"])
def test_a_vault_answer_holding_a_wrapping_token_is_refused_and_never_reaches_the_client(
    tunnels: Tunnels, path: str
) -> None:
    port = tunnels.ports[VAULT]
    head = _get(path, f"Host: {VAULT}:{port}", f"X-Vault-Token: {tunnels.placeholder.reveal()}")
    status, body = tunnels.exchange(tunnels.authority(VAULT), head)
    assert status == 502, body
    assert b"wrapping token" in body
    assert WRAPPING_TOKEN.encode() not in body
    assert tunnels.refused() == {RefusedRequest(f"{VAULT}:{port}", Refusal.WRAPPED): 1}


def test_vault_answers_without_a_wrapping_token_pass_whole_and_an_unchecked_one_is_refused(tunnels: Tunnels) -> None:
    port = tunnels.ports[VAULT]

    def fetch(path: str, host: str = VAULT) -> tuple[int, bytes]:
        head = _get(path, f"Host: {host}:{tunnels.ports[host]}", f"X-Vault-Token: {tunnels.placeholder.reveal()}")
        return tunnels.exchange(tunnels.authority(host), head)

    status, body = fetch("/nested")
    assert status == 200 and json.loads(body) == {"data": {"wrap_info": {"token": "kept"}}, "wrap_info": None}
    status, body = fetch("/big-pem")  # not JSON: Vault never wraps it, so it streams through
    assert status == 200 and len(body) == BIG
    status, body = fetch("/wrapped", host=API)  # not a Vault host: nothing to unwrap there
    assert status == 200 and json.loads(body)["wrap_info"]["token"] == WRAPPING_TOKEN
    status, body = fetch("/big-json")
    assert status == 502 and b"cannot be checked" in body
    assert tunnels.refused() == {RefusedRequest(f"{VAULT}:{port}", Refusal.UNCHECKED): 1}


def test_plain_http_to_a_credential_host_is_refused_with_a_pointer_to_https(tunnels: Tunnels) -> None:
    assert tunnels.proxy.port is not None
    proxies = {"http": f"http://127.0.0.1:{tunnels.proxy.port}"}
    placeholder = tunnels.placeholder.reveal()
    vault_port, api_port, v6_port = tunnels.ports[VAULT], tunnels.ports[API], tunnels.ports[V6]
    for url, https in (
        (f"http://{VAULT}:{vault_port}/v1/auth/token/lookup-self", f"https://{VAULT}:{vault_port}"),
        (f"http://{API}/user", f"https://{API}:{api_port}"),  # port 80, which the session may reach
        (f"http://[::1]:{v6_port}/user", f"https://[::1]:{v6_port}"),
    ):
        answer = requests.get(url, headers={"X-Vault-Token": placeholder}, proxies=proxies, timeout=20)
        assert answer.status_code == 403, answer.text
        assert f"use {https}" in answer.text
        assert placeholder not in answer.text
    assert tunnels.seen == []
    assert tunnels.refused() == {
        RefusedRequest(f"{VAULT}:{vault_port}", Refusal.PLAIN_HTTP): 1,
        RefusedRequest(f"{API}:80", Refusal.PLAIN_HTTP): 1,
        RefusedRequest(f"[::1]:{v6_port}", Refusal.PLAIN_HTTP): 1,
    }


def test_refused_requests_are_counted_within_a_bound_and_none_goes_uncounted(tmp_path: Path) -> None:
    interceptor = Interceptor(SessionCA([VAULT], datetime.now(UTC) + timedelta(minutes=5)))
    token = Secret("hvs.CAESIREAL" + secrets.token_hex(24))
    interceptor.add(
        Injection(frozenset({(VAULT, 8200)}), placeholder_for(token), token, None, VAULT_HEADERS, VAULT_GUARD)
    )
    with proxy_thread(
        (parse_destination(f"{VAULT}:8200"),),
        unix=False,
        tcp=True,
        limits=ProxyLimits(max_denied_destinations=2),
        interceptor=interceptor,
    ) as proxy:
        proxies = {"http": f"http://127.0.0.1:{proxy.port}"}
        for port in (8200, 81, 82, 83, 8200):
            answer = requests.get(f"http://{VAULT}:{port}/v1/sys/health", proxies=proxies, timeout=20)
            assert answer.status_code == 403 and "use https://vault.test:8200" in answer.text
        refused = proxy.denials()
    assert refused == {
        RefusedRequest(f"{VAULT}:8200", Refusal.PLAIN_HTTP): 2,
        RefusedRequest(f"{VAULT}:81", Refusal.PLAIN_HTTP): 1,
        RefusedRequest("(other destinations)", Refusal.PLAIN_HTTP): 2,
    }
