"""``broker issue --gateway`` and the life of a gateway session: what the launcher gets, what reaches it later.

A daemon whose gateway listens on loopback (no TLS, which loopback allows).
The session's directory holds its proxy credential (0400, the sandbox user's)
and the proxy variables; the document and every ``--format`` name the gateway
and never the secret. While the daemon holds the session, what reaches a
running exec's session reaches it the same way (its control socket is the
gateway's): ``broker renew`` swaps a ``kind: secret``'s new KV version in behind
the same placeholder, ``session allow`` opens a destination of its rule, and a
withdrawn grant stops its renewals. A direct ``issue --gateway``, a daemon
without a gateway and a credential named like the gateway's folder are refused
with nothing minted; when the daemon stops, every gateway session is revoked.
"""

from __future__ import annotations

import shlex
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.gateway import GatewayStack, gateway_stack
from tests.fixtures.openbao import OpenBao

pytestmark = [pytest.mark.server, pytest.mark.root]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, openbao: OpenBao) -> Iterator[GatewayStack]:
    yield from gateway_stack(tmp_path_factory.mktemp("gateway"), openbao, "127.0.0.1")


def request(stack: GatewayStack, document: dict[str, object], path: str, placeholder: str) -> bytes:
    tunnel = stack.tunnel(document)
    try:
        tunnel.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {stack.api_host}\r\nAuthorization: Bearer {placeholder}\r\n\r\n".encode()
        )
        return tunnel.recv(65536)
    finally:
        tunnel.close()


def test_the_launcher_gets_the_credential_as_a_file_and_never_on_stdout(stack: GatewayStack) -> None:
    task = stack.task("fix-gw-files")
    result = stack.daemon.client("issue", "--gateway", "--task", str(task), "--format", "podman")
    assert result.code == 0, result.stderr
    args = shlex.split(result.stdout)
    session = next(a for a in args if a.startswith("broker.session=")).partition("=")[2]
    env_file = args[args.index("--env-file") + 1]
    directory = Path(env_file).parents[1]
    secret = (directory / "proxy" / "credential").read_text()
    assert secret not in result.stdout + result.stderr
    for name in ("credential", "env"):
        info = (directory / "proxy" / name).stat()
        assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (0o400, 1000, 1000)
    assert Path(env_file).read_text().splitlines()[0] == f"HTTPS_PROXY=http://{session}:{secret}@127.0.0.1:{stack.port}"
    listed = stack.daemon.client("status", "--json")
    assert secret not in listed.stdout and session in listed.stdout
    document = stack.issue(task)
    assert document["proxy_url"] == f"http://{document['session']}@127.0.0.1:{stack.port}"
    assert stack.secret(document) not in str(document)
    assert stack.env.log_path.read_text().count(stack.secret(document)) == 0
    for each in (session, document["session"]):
        assert stack.revoke(each).code == 0


def test_renew_and_session_allow_reach_the_gateways_session(stack: GatewayStack, openbao: OpenBao) -> None:
    document = stack.issue(stack.task("fix-gw-renew"))
    session, placeholder = document["session"], document["env"]["OPENAI_API_KEY"]
    kv = openbao.client().secrets.kv.v2
    rotated = stack.key[:-4] + "ROT1"
    kv.create_or_update_secret(path="llm/openai", secret={"api_key": rotated})
    try:
        renewed = stack.daemon.client("renew", "--session", session, "--json")
        assert renewed.code == 0, renewed.stderr
        assert renewed.json()[0]["outcome"] == "renewed"
        assert request(stack, document, "/v1/after-renew", placeholder).startswith(b"HTTP/1.1 200")
        seen = {s.path: {k.lower(): v for k, v in s.headers} for s in stack.api.seen}
        assert seen["/v1/after-renew"]["authorization"] == f"Bearer {rotated}"  # the same placeholder, the new key
        narrowed = stack.daemon.client("session", "disallow", "--session", session, stack.api_host)
        assert narrowed.code == 0, narrowed.stderr
        status, _, sock = stack.ask(f"CONNECT {stack.api_host}", session, stack.secret(document))
        sock.close()
        assert status == 403  # refused by the session's own allow-list now
        widened = stack.daemon.client("session", "allow", "--session", session, stack.api_host)
        assert widened.code == 0, widened.stderr
        assert request(stack, document, "/v1/after-allow", placeholder).startswith(b"HTTP/1.1 200")
    finally:
        kv.create_or_update_secret(path="llm/openai", secret={"api_key": stack.key})
        stack.revoke(session)


def test_a_withdrawn_grant_stops_the_gateways_renewals(stack: GatewayStack, openbao: OpenBao) -> None:
    document = stack.issue(stack.task("fix-gw-withdrawn"))
    session = document["session"]
    policy = stack.env.policy_dir / "agents.yaml"
    text = policy.read_text()
    policy.write_text(text.replace('tasks: ["fix-*"]', 'tasks: ["review-*"]'))
    kv = openbao.client().secrets.kv.v2
    kv.create_or_update_secret(path="llm/openai", secret={"api_key": stack.key[:-4] + "ROT2"})
    try:
        renewed = stack.daemon.client("renew", "--session", session, "--json")
        assert renewed.code == 3, renewed.stdout + renewed.stderr
        assert renewed.json()[0]["outcome"] == "denied"
        assert stack.records(session, "session.policy_withdrawn")
    finally:
        policy.write_text(text)
        kv.create_or_update_secret(path="llm/openai", secret={"api_key": stack.key})
        stack.revoke(session)


def test_what_is_refused_before_anything_is_minted(stack: GatewayStack, tmp_path: Path) -> None:
    task = stack.task("fix-gw-refused")
    config = tmp_path / "direct.toml"  # no [daemon] socket: issue runs directly, where no gateway is
    config.write_text(stack.env.config_path.read_text().replace(f'socket = "{stack.daemon.socket}"', ""))
    argv = [sys.executable, "-m", "broker", "--config", str(config), "issue", "--gateway", "--task", str(task)]
    direct = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert direct.returncode == 2
    assert direct.stderr.strip() == (
        "broker: error: issue --gateway: the gateway runs in broker serve, which holds the session; set [daemon]"
        " socket in the config (or BROKER_SOCKET) so issue goes through it"
    )
    named = stack.daemon.shared / "named.yaml"
    named.write_text(task.read_text().replace("- name: service", "- name: proxy"))
    named.chmod(0o644)
    refused = stack.daemon.client("issue", "--gateway", "--task", str(named))
    assert refused.code == 2 and "credential name 'proxy' is the gateway's own" in refused.stderr
    issued = [r for r in stack.env.log_records() if r["event"] == "session.issued" and r["task"] == "fix-gw-refused"]
    assert issued == []


def test_a_daemon_that_stops_revokes_every_gateway_session(stack: GatewayStack) -> None:
    documents = [stack.issue(stack.task(f"fix-gw-stop-{n}")) for n in range(3)]
    assert stack.daemon.stop(signal.SIGTERM) == 0
    for document in documents:
        events = [r["event"] for r in stack.records(document["session"], "session.revoked")]
        assert events == ["session.revoked"]
        assert not Path(document["dir"]).exists()
