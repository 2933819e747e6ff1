"""``inject: proxy`` for real: git, curl and requests through the proxy, over HTTPS with the session CA.

The sandbox side holds only placeholders; the proxy terminates TLS for the
credential hosts with the session CA and puts the real GitHub installation
token (the emulator's) and Vault token (OpenBao's) in. The upstreams are the
real local servers behind a TLS front (``tests/fixtures/tls.py``); the one
stand-in is DNS (a fixed table: no real name here resolves to loopback).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath

import pytest
import requests
from cryptography import x509

from broker.egress.destinations import parse_destination
from broker.egress.injectors.swap import Injection
from broker.egress.proxy.thread import ProxyThread, proxy_thread
from broker.egress.terminate.ca import SessionCA, ca_bundle
from broker.egress.terminate.interceptor import Interceptor
from broker.vocab.secret import Secret
from devstack.github_app import GitHubAppEmulator
from providers.github.git import GitHost, gitconfig
from providers.placeholders import placeholder_for
from tests.fixtures.openbao import VAULT_GUARD, VAULT_HEADERS, OpenBao
from tests.fixtures.tls import TLSFront, backend_port, git_server, make_test_ca

API, GIT, VAULT, ELSEWHERE = "api.github.test", "github.test", "vault.test", "elsewhere.test"


class Recorder(BaseHTTPRequestHandler):
    """A host that is not the credential's: it records what it was sent."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.server.seen.append(dict(self.headers.items()))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return


@dataclass
class Stack:
    proxy: ProxyThread
    interceptor: Interceptor
    env: dict[str, str]
    ports: dict[str, int]
    github_token: Secret
    github_placeholder: Secret
    vault_token: Secret
    vault_placeholder: Secret
    emulator: GitHubAppEmulator
    openbao: OpenBao
    seen_elsewhere: list[dict[str, str]]
    home: Path
    upstream_ca: Path

    def url(self, host: str, path: str) -> str:
        return f"https://{host}:{self.ports[host]}{path}"


def _bare_repository(root: Path) -> None:
    bare = root / "octo-org" / "widgets.git"
    work = root.parent / "work"
    quiet = {"check": True, "capture_output": True}
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], **quiet)  # type: ignore[call-overload]
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], **quiet)  # type: ignore[call-overload]
    (work / "README").write_text("widgets\n")
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "-C", str(work), "add", "README"], **quiet)  # type: ignore[call-overload]
    subprocess.run(["git", "-C", str(work), *identity, "commit", "-qm", "first"], **quiet)  # type: ignore[call-overload]
    subprocess.run(["git", "-C", str(work), "push", "-q", str(bare), "main"], **quiet)  # type: ignore[call-overload]


@pytest.fixture
def stack(tmp_path: Path, github_emulator: GitHubAppEmulator, openbao: OpenBao) -> Iterator[Stack]:
    test_ca = make_test_ca(tmp_path, [API, GIT, VAULT, ELSEWHERE])
    installation = next(iter(github_emulator.state.installations.values()))
    minted = github_emulator.state.create_token(github_emulator.api_url, str(installation.id), {})
    github_token = Secret(minted.body["token"])
    created = openbao.client().auth.token.create(policies=["default"], ttl="10m")
    vault_token = Secret(created["auth"]["client_token"])
    repos = tmp_path / "repos"
    _bare_repository(repos)
    recorder = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    recorder.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=recorder.serve_forever, daemon=True).start()

    def live_github_token(password: str) -> bool:
        return github_emulator.token_state(password) == "valid"

    with git_server(repos, live_github_token) as git_port:
        backends = {
            API: backend_port(github_emulator.api_url),
            GIT: git_port,
            VAULT: backend_port(openbao.addr),
            ELSEWHERE: int(recorder.server_address[1]),
        }
        fronts = {host: TLSFront(test_ca.context, port) for host, port in backends.items()}
        ports = {host: front.port for host, front in fronts.items()}
        allow = tuple(parse_destination(f"{h}:{p}") for h, p in ports.items()) + tuple(
            parse_destination(f"127.0.0.1:{p}") for p in ports.values()
        )
        ca = SessionCA([API, GIT, VAULT], datetime.now(UTC) + timedelta(minutes=20))
        interceptor = Interceptor(ca)
        github_placeholder, vault_placeholder = placeholder_for(github_token), placeholder_for(vault_token)
        interceptor.add(
            Injection(
                frozenset({(API, ports[API]), (GIT, ports[GIT])}), github_placeholder, github_token, test_ca.cert_file
            )
        )
        interceptor.add(
            Injection(
                frozenset({(VAULT, ports[VAULT])}),
                vault_placeholder,
                vault_token,
                test_ca.cert_file,
                VAULT_HEADERS,
                VAULT_GUARD,
            )
        )

        async def resolve(host: str, port: int) -> list[str]:
            if host not in ports:
                raise OSError("no such name")
            return ["127.0.0.1"]

        bundle = tmp_path / "ca-bundle.pem"
        system = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
        bundle.write_bytes(ca_bundle(ca.pem, system.read_bytes() if system.exists() else b""))
        home = tmp_path / "home"
        home.mkdir()
        with proxy_thread(allow, unix=False, tcp=True, resolver=resolve, interceptor=interceptor) as proxy:
            url = f"http://127.0.0.1:{proxy.port}"
            env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("GIT_")}
            env.update(
                {
                    "HTTPS_PROXY": url,
                    "https_proxy": url,
                    "HOME": str(home),
                    "GIT_SSL_CAINFO": str(bundle),
                    "CURL_CA_BUNDLE": str(bundle),
                    "REQUESTS_CA_BUNDLE": str(bundle),
                    "SSL_CERT_FILE": str(bundle),
                    "GIT_TERMINAL_PROMPT": "0",
                }
            )
            yield Stack(
                proxy,
                interceptor,
                env,
                ports,
                github_token,
                github_placeholder,
                vault_token,
                vault_placeholder,
                github_emulator,
                openbao,
                recorder.seen,  # type: ignore[attr-defined]
                home,
                test_ca.cert_file,
            )
        for front in fronts.values():
            front.close()
    recorder.shutdown()
    recorder.server_close()


def curl(stack: Stack, url: str, *headers: str, cacert: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["curl", "-sS", "--max-time", "20", "-w", "\n%{http_code}", url]
    if cacert is not None:
        argv += ["--cacert", str(cacert)]
    for header in headers:
        argv += ["-H", header]
    return subprocess.run(argv, env=stack.env, capture_output=True, text=True, timeout=30, check=False)


def test_placeholders_have_the_shape_of_the_secret() -> None:
    for real in ("ghs_" + "A1b2" * 10, "hvs.CAESI" + "x" * 80, "s.abcdefghijklmnopqrstuvwx"):
        fake = placeholder_for(Secret(real)).reveal()
        assert fake != real and len(fake) == len(real)
        assert fake[:4] == real[:4] if real.startswith(("ghs_", "hvs.")) else fake[:2] == real[:2]


def test_a_whole_token_header_is_swapped_only_for_the_provider_that_names_it() -> None:
    """Vault names X-Vault-Token; a GitHub placeholder there goes out as it is, in Authorization it is swapped."""
    github, vault = Secret("ghs_" + "A1b2" * 10), Secret("hvs.CAESI" + "x" * 80)
    github_placeholder, vault_placeholder = placeholder_for(github), placeholder_for(vault)
    interceptor = Interceptor(SessionCA([API, VAULT], datetime.now(UTC) + timedelta(minutes=5)))
    interceptor.add(Injection(frozenset({(API, 443)}), github_placeholder, github))
    interceptor.add(Injection(frozenset({(VAULT, 443)}), vault_placeholder, vault, token_headers=VAULT_HEADERS))

    def swap(host: str, name: bytes, value: bytes) -> bytes:
        [(_, swapped)] = interceptor.swap(host, 443, [(name, value)])
        return swapped

    assert swap(VAULT, b"x-vault-token", vault_placeholder.reveal_bytes()) == vault.reveal_bytes()
    assert swap(API, b"x-vault-token", github_placeholder.reveal_bytes()) == github_placeholder.reveal_bytes()
    bearer = b"Bearer " + github_placeholder.reveal_bytes()
    assert swap(API, b"authorization", bearer) == b"Bearer " + github.reveal_bytes()


def test_curl_reaches_github_with_the_token_the_proxy_puts_in(stack: Stack) -> None:
    for scheme in ("token", "Bearer"):
        result = curl(
            stack,
            stack.url(API, "/installation/repositories"),
            f"Authorization: {scheme} {stack.github_placeholder.reveal()}",
        )
        body, _, status = result.stdout.rpartition("\n")
        assert status == "200", result.stderr
        assert json.loads(body)["total_count"] >= 1
    sent = stack.emulator.calls_to("installation_repositories")[-1].authorization
    assert sent == f"Bearer {stack.github_token.reveal()}"
    assert stack.github_token.reveal() not in result.stdout + result.stderr


def test_requests_reaches_openbao_and_github_with_the_hints_alone(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in list(os.environ):
        if "proxy" in key.lower():
            monkeypatch.delenv(key)
    for key in ("HTTPS_PROXY", "REQUESTS_CA_BUNDLE"):
        monkeypatch.setenv(key, stack.env[key])
    answer = requests.get(
        stack.url(VAULT, "/v1/auth/token/lookup-self"),
        headers={"X-Vault-Token": stack.vault_placeholder.reveal()},
        timeout=20,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"]["policies"] == ["default"]
    answer = requests.get(
        stack.url(API, "/installation/repositories"),
        headers={"Authorization": f"Bearer {stack.github_placeholder.reveal()}"},
        timeout=20,
    )
    assert answer.status_code == 200, answer.text


def test_a_wrapped_lookup_self_never_carries_the_session_token_out(stack: Stack) -> None:
    """Response wrapping asked for through the proxy: OpenBao answers unwrapped, so no wrapping token exists that
    would unwrap, outside the sandbox, to the real token (``auth/token/lookup-self`` shows the token's id)."""
    vault_url = stack.url(VAULT, "/v1/auth/token/lookup-self")
    for wrapping in ({"X-Vault-Wrap-TTL": "300"}, {"x-vault-wrap-ttl": "5m", "X-Vault-Wrap-Format": "jwt"}):
        result = curl(
            stack,
            vault_url,
            f"X-Vault-Token: {stack.vault_placeholder.reveal()}",
            *(f"{name}: {value}" for name, value in wrapping.items()),
        )
        body, _, status = result.stdout.rpartition("\n")
        answer = json.loads(body)
        wrap = answer.get("wrap_info") or {}
        unwrapped = requests.post(  # what the sandbox would do elsewhere with a wrapping token, had it got one
            stack.openbao.addr + "/v1/sys/wrapping/unwrap", headers={"X-Vault-Token": wrap.get("token", "")}, timeout=10
        )
        assert stack.vault_token.reveal() not in unwrapped.text
        assert status == "200", result.stderr
        assert answer["wrap_info"] is None
        assert answer["data"]["id"] == stack.vault_placeholder.reveal()  # the echo masked, as always
    # Wrapping data the sandbox names needs the wrapping header too: without it OpenBao wraps nothing.
    wrapped = requests.post(
        stack.url(VAULT, "/v1/sys/wrapping/wrap"),
        headers={"X-Vault-Token": stack.vault_placeholder.reveal(), "X-Vault-Wrap-TTL": "300"},
        json={"token": stack.vault_placeholder.reveal()},
        proxies={"https": stack.env["HTTPS_PROXY"]},
        verify=stack.env["REQUESTS_CA_BUNDLE"],
        timeout=20,
    )
    assert wrapped.status_code == 400, wrapped.text
    assert "wrap_info" not in wrapped.json()


def test_git_clones_with_basic_auth_from_its_credential_helper(stack: Stack, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(stack.github_placeholder.reveal())
    config = tmp_path / "gitconfig"
    config.write_text(gitconfig(GitHost("https", f"{GIT}:{stack.ports[GIT]}"), PurePosixPath(token_file)))
    env = {**stack.env, "GIT_CONFIG_GLOBAL": str(config)}
    target = tmp_path / "clone"
    result = subprocess.run(
        ["git", "clone", "-q", stack.url(GIT, "/octo-org/widgets.git"), str(target)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (target / "README").read_text() == "widgets\n"
    assert stack.github_token.reveal() not in result.stdout + result.stderr


def test_a_placeholder_anywhere_else_goes_out_as_is_and_is_worthless(stack: Stack) -> None:
    placeholder = stack.github_placeholder.reveal()
    result = curl(
        stack,
        stack.url(ELSEWHERE, "/"),
        f"Authorization: token {placeholder}",
        f"X-Vault-Token: {placeholder}",
        cacert=stack.upstream_ca,
    )
    assert result.stdout.endswith("200"), result.stderr
    assert stack.seen_elsewhere[-1]["Authorization"] == f"token {placeholder}"
    assert stack.seen_elsewhere[-1]["X-Vault-Token"] == placeholder
    # At the providers themselves, without the proxy, the placeholders are refused.
    direct = requests.get(
        stack.emulator.api_url + "/installation/repositories",
        headers={"Authorization": f"token {placeholder}"},
        timeout=10,
    )
    assert direct.status_code == 401
    vault = requests.get(
        stack.openbao.addr + "/v1/auth/token/lookup-self",
        headers={"X-Vault-Token": stack.vault_placeholder.reveal()},
        timeout=10,
    )
    assert vault.status_code == 403
    # The GitHub placeholder sent to the Vault host is not swapped either: only a credential's own hosts get it.
    wrong = curl(stack, stack.url(VAULT, "/v1/auth/token/lookup-self"), f"X-Vault-Token: {placeholder}")
    assert wrong.stdout.endswith("403"), wrong.stderr


def test_other_headers_and_schemes_are_left_alone(stack: Stack) -> None:
    placeholder = stack.github_placeholder.reveal()
    basic_user = base64.b64encode(f"{placeholder}:x-oauth-basic".encode()).decode()
    swapped = stack.interceptor.swap(
        API,
        stack.ports[API],
        [
            (b"authorization", f"Basic {basic_user}".encode()),
            (b"x-other", placeholder.encode()),
            (b"cookie", placeholder.encode()),
        ],
    )
    user = base64.b64decode(swapped[0][1].split(b" ")[1]).decode().partition(":")[0]
    assert user == stack.github_token.reveal()
    assert swapped[1:] == [(b"x-other", placeholder.encode()), (b"cookie", placeholder.encode())]
    assert stack.interceptor.swap(API, stack.ports[API] + 1, [(b"authorization", f"token {placeholder}".encode())]) == [
        (b"authorization", f"token {placeholder}".encode())
    ]


def test_revoking_makes_the_proxy_refuse_before_the_provider_does(stack: Stack) -> None:
    before = len(stack.emulator.calls_to("installation_repositories"))
    stack.interceptor.revoke()
    result = curl(
        stack, stack.url(API, "/installation/repositories"), f"Authorization: token {stack.github_placeholder.reveal()}"
    )
    assert result.returncode != 0 and "403" in result.stderr
    assert stack.emulator.token_state(stack.github_token.reveal()) == "valid"  # the provider has not revoked yet
    assert len(stack.emulator.calls_to("installation_repositories")) == before
    assert stack.github_token.reveal() not in result.stdout + result.stderr


def test_the_session_ca_is_name_constrained_to_the_credential_hosts() -> None:
    ca = SessionCA([API, GIT, "127.0.0.1"], datetime.now(UTC) + timedelta(minutes=5))
    certificate = x509.load_pem_x509_certificate(ca.pem)
    constraints = certificate.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    permitted = {str(getattr(n, "value", n)) for n in constraints.value.permitted_subtrees or []}
    assert permitted == {API, GIT, "127.0.0.1/32"}
    assert certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0
    assert certificate.public_key().curve.name == "secp256r1"  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        ca.server_context(ELSEWHERE)
    assert b"PRIVATE" not in ca.pem
