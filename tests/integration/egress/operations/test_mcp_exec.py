"""``operations: mcp`` from inside ``broker exec --sandbox bwrap --network allowlist``, for real.

The MCP server is the official SDK's (``devstack.mcp.server``) behind TLS on
loopback, and takes one bearer token, which lives in OpenBao's KV engine: the
session's ``kind: secret`` credential puts it in behind a placeholder
(``inject: proxy``, ``Authorization: Bearer {}``), so the token never enters
the sandbox. Inside, the SDK's own client (the test's virtualenv bound
read-only) talks to the server through the session's proxy with the hints
alone, once opening a session (SSE answers) and once on MCP's 2026 protocol
(JSON answers, ``Mcp-Method``/``Mcp-Name``); curl sends a call whose
``Mcp-Method`` names another method. The rule is the README's example. The
same run goes through ``broker serve`` too: the daemon holds the session and
its proxy, the thin client runs bubblewrap.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv, Result, make_env
from tests.fixtures.daemon import Daemon
from tests.fixtures.mcp_stage import AGENT, REACHED_CALLS, RULE_ID, Upstream, check_agent, mcp_upstream, rule_operations
from tests.fixtures.openbao import ROOT_TOKEN, OpenBao
from tests.fixtures.sandbox import python_runtime, sandbox_unavailable

__all__ = ["mcp_upstream"]
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

VENV = Path(sys.prefix)  # the SDK's client, bound read-only into the sandbox
MISMATCH = '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"merge_pull_request","arguments":{}}}'


@dataclass
class Session:
    env: BrokerEnv
    upstream: Upstream
    authority: str

    def task(self) -> Path:
        return self.env.write_task(
            f"""
version: 1
task: fix-widgets-1
ttl: 20m
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
network: {{allow: ["{self.authority}"]}}
credentials:
  - name: github_mcp
    provider: vault
    kind: secret
    path: mcp/github
    field: token
    inject: proxy
    hosts: ["{self.authority}"]
    header: "Authorization: Bearer {{}}"
    env: MCP_TOKEN
"""
        )

    def script(self) -> str:
        url = f"https://{self.authority}/mcp"
        agent = AGENT.read_text()
        runs = "".join(
            f"echo '--- {mode}'\n{VENV}/bin/python - {url} {mode} MCP_TOKEN <<'PY'\n{agent}\nPY\n"
            for mode in ("legacy", "auto")
        )
        curl = (
            f"curl -sS -w '\\nmismatch=%{{http_code}}\\n' -H 'Content-Type: application/json'"
            f" -H 'Accept: application/json, text/event-stream' -H 'Mcp-Method: tools/list'"
            f" -H \"Authorization: Bearer $MCP_TOKEN\" --data '{MISMATCH}' {url}\n"
        )
        return 'export NO_PROXY= no_proxy= HOME=/workspace\necho "placeholder=$MCP_TOKEN"\n' + runs + curl

    def run(self) -> Result:
        _, prefix = python_runtime()
        binds = ["--ro-bind", prefix, "--ro-bind", str(VENV)]
        options = ["--sandbox", "bwrap", "--network", "allowlist", *binds]
        return self.env.run_process(
            "exec", "--task", str(self.task()), *options, "--", "sh", "-c", self.script(), timeout=240
        )


@pytest.fixture
def session(tmp_path: Path, openbao: OpenBao, mcp_upstream: Upstream) -> Iterator[Session]:
    authority = f"127.0.0.1:{mcp_upstream.server.port}"
    env = make_env(tmp_path)
    env.tables["egress"] = {"upstream_ca_file": str(mcp_upstream.ca.cert_file)}
    env.add_provider(
        "vault",
        {"type": "vault", "addr": openbao.addr, "token_file": str(env.write_secret("vault-token", ROOT_TOKEN))},
    )
    operations = json.dumps({"mcp": rule_operations(authority)})
    env.write_policy(
        f"""
rules:
  - id: {RULE_ID}
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["{authority}"]
    operations: {operations}
    grants:
      - provider: vault
        secret_paths: ["mcp/*"]
        secret_hosts: ["{authority}"]
        secret_headers: ["Authorization: Bearer {{}}"]
"""
    )
    openbao.client().secrets.kv.v2.create_or_update_secret(path="mcp/github", secret={"token": mcp_upstream.token})
    try:
        yield Session(env, mcp_upstream, authority)
    finally:
        env.cleanup()


def test_the_sdk_client_in_bubblewrap_is_held_to_the_rule_and_never_holds_the_token(session: Session) -> None:
    server = session.upstream.server
    before = len(server.calls())
    result = session.run()
    assert result.code == 0, result.stdout + result.stderr
    found = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"tools"')]
    assert len(found) == 2, result.stdout + result.stderr
    for agent in found:  # legacy (SSE answers), then auto (JSON answers, Mcp-Method and Mcp-Name)
        check_agent(agent)
    mismatch = json.loads(next(line for line in result.stdout.splitlines() if line.startswith('{"jsonrpc"')))
    assert "mismatch=400" in result.stdout and mismatch["id"] == 9 and mismatch["error"]["code"] == -32600
    assert mismatch["error"]["message"].endswith("the Mcp-Method header does not name the body's method")
    # The server saw only what the rule allows, every time with the real token.
    reached = server.calls()[before:]
    called = [(s.method, s.name) for s in reached if s.method in ("tools/call", "resources/read", "prompts/get")]
    assert called == 2 * REACHED_CALLS
    assert {seen.bearer for seen in reached} == {session.upstream.token}
    # The sandbox held a placeholder; the token is in no output and no record.
    placeholder = next(line.split("=", 1)[1] for line in result.stdout.splitlines() if line.startswith("placeholder="))
    assert placeholder and placeholder != session.upstream.token
    assert session.upstream.token not in result.stdout + result.stderr
    assert session.upstream.token not in session.env.log_path.read_text()
    # Each MCP request is an egress.request record of the session that audit verify covers.
    [issued] = {r["session"] for r in session.env.log_records() if r["event"] == "session.issued"}
    listed = session.env.run("audit", "list", "--event", "egress.request", "--session", issued, "--json")
    assert listed.code == 0, listed.stderr
    records = [json.loads(line) for line in listed.stdout.splitlines()]
    calls = [(r["tool"], r["decision"]) for r in records if r.get("mcp_method") == "tools/call"]
    assert calls == 2 * [
        ("get_issue", "allowed"),
        ("create_pull_request", "allowed"),
        ("create_pull_request", "refused"),
        ("merge_pull_request", "refused"),
    ] + [("merge_pull_request", "refused")]  # the call whose Mcp-Method disagreed
    assert all(r["operations"] == "mcp" and r["rule"] == RULE_ID for r in records)
    assert all(len(r["arguments_sha256"]) == 64 for r in records if r.get("mcp_method") == "tools/call")
    assert session.env.run("audit", "verify").code == 0


def test_through_the_daemon_the_held_exec_is_held_to_the_same_rule(session: Session) -> None:
    """``broker exec`` as ``broker serve``'s thin client: the daemon holds the session and runs its proxy, the client
    runs bubblewrap; the SDK's client inside gets the same answers, and the server sees only what the rule allows,
    with the real token, which is in no output."""
    shared = Path(tempfile.mkdtemp(prefix="broker-daemon-", dir="/tmp"))
    shared.chmod(0o755)
    session.env.tables["daemon"] = {"socket": str(shared / "broker.sock")}
    session.env.write_config()
    daemon = Daemon(session.env, shared).start()
    try:
        server = session.upstream.server
        before = len(server.calls())
        _, prefix = python_runtime()
        options = ["--sandbox", "bwrap", "--network", "allowlist", "--ro-bind", prefix, "--ro-bind", str(VENV)]
        task = str(session.task())
        result = daemon.client("exec", "--task", task, *options, "--", "sh", "-c", session.script(), timeout=240)
        assert result.code == 0, result.stdout + result.stderr
        found = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"tools"')]
        assert len(found) == 2, result.stdout + result.stderr
        for agent in found:
            check_agent(agent)
        reached = server.calls()[before:]
        called = [(s.method, s.name) for s in reached if s.method in ("tools/call", "resources/read", "prompts/get")]
        assert called == 2 * REACHED_CALLS
        assert {seen.bearer for seen in reached} == {session.upstream.token}
        assert session.upstream.token not in result.stdout + result.stderr
    finally:
        daemon.stop()
        shutil.rmtree(shared, ignore_errors=True)
