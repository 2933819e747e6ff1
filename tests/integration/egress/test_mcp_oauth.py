"""An MCP server that takes only OAuth access tokens, its tools limited by the rule, used from inside ``broker exec``.

The real parts: the authorisation server (authlib, TLS, loopback:
``tests/fixtures/oauth.py``); the official SDK's MCP server
(``devstack.mcp.server``), whose bearer check is introspection at that
server (``IntrospectedTokens``: only a live token issued for the MCP
server's origin passes); and the SDK's client (``tests/fixtures/mcp_agent.py``)
inside bubblewrap, the session's proxy its only way out. The broker's
``oauth`` instance holds the operator's refresh token and its client secret
and mints the access token for the MCP host as an RFC 8707 resource
(``inject: proxy``: the sandbox holds a placeholder, the proxy puts the
token in); the rule's ``operations: mcp`` is the README's example (read
tools and pull requests onto ``agent/*``, never a merge).
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from devstack.mcp.server import IntrospectedTokens, McpServer
from devstack.oauth.resource import Introspector
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.mcp_stage import AGENT, HOST, REACHED_CALLS, RULE_ID, check_agent, rule_operations
from tests.fixtures.oauth import CLIENT_ID, CLIENT_SECRET, RESOURCE_CLIENT, RESOURCE_SECRET, OAuthStack
from tests.fixtures.sandbox import python_runtime, sandbox_unavailable
from tests.fixtures.tls import make_test_ca

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

VENV = Path(sys.prefix)  # the SDK's client, bound read-only into the sandbox
SECRETS = "/run/secrets"
INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "direct", "version": "1"}}
MODES = ("legacy", "auto")  # a session opened (SSE answers), then MCP's 2026 protocol (JSON answers)


@dataclass
class McpOAuth:
    env: BrokerEnv
    stack: OAuthStack
    server: McpServer
    ca_file: Path  # the MCP server's CA
    authority: str  # 127.0.0.1:PORT, the MCP host

    def run(self) -> tuple[int, str, str]:
        task = self.env.write_task(
            f"""
            version: 1
            task: fix-widgets-1
            ttl: 10m
            sandbox: {{uid: 1000, gid: 1000, mount_path: {SECRETS}}}
            network: {{allow: ["{self.authority}"]}}
            credentials:
              - {{name: mcp, provider: oauth, inject: proxy, scopes: [issues:read]}}
            """
        )
        url = f"https://{self.authority}/mcp"
        agent = AGENT.read_text()
        runs = "".join(f"{VENV}/bin/python - {url} {mode} MCP_TOKEN <<'PY'\n{agent}\nPY\n" for mode in MODES)
        script = (
            f"export NO_PROXY= no_proxy= HOME=/workspace MCP_TOKEN=$(cat {SECRETS}/mcp/token)\n"
            'echo "placeholder=$MCP_TOKEN"\n'
            f"{runs}"
            "echo '--- env'\nenv\n"
            "echo '--- files'\n"
            # All it has beside the host's /usr and the test run's own Python (bound read-only, wherever it is).
            f"find /run /workspace /tmp -path {VENV} -prune -o -type f -exec cat {{}} + 2>&1 || true\n"
        )
        _, prefix = python_runtime()
        options = ["--sandbox", "bwrap", "--network", "allowlist", "--ro-bind", prefix, "--ro-bind", str(VENV)]
        result = self.env.run_process("exec", "--task", str(task), *options, "--", "sh", "-c", script, timeout=120)
        return result.code, result.stdout, result.stderr

    def direct(self, token: str) -> int:
        """The status the MCP server answers an ``initialize`` bearing ``token`` that did not come by the proxy."""
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE}
        answer = requests.post(
            f"https://{self.authority}/mcp",
            json=body,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
            verify=str(self.ca_file),
            timeout=10,
        )
        return answer.status_code

    def fresh_token(self) -> str:
        """A live access token for the MCP server, asked of the authorisation server with the broker's client."""
        answer = requests.post(
            self.stack.server.token_url,
            data={"grant_type": "client_credentials", "scope": "issues:read", "resource": f"https://{self.authority}"},
            auth=(CLIENT_ID, CLIENT_SECRET),
            verify=str(self.stack.ca_file),
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        return str(answer.json()["access_token"])

    def introspect(self, token: str) -> dict[str, object]:
        """What the authorisation server says of ``token`` to the MCP server's client."""
        answer = requests.post(
            self.stack.server.introspection_url,
            data={"token": token, "token_type_hint": "access_token"},
            auth=(RESOURCE_CLIENT, RESOURCE_SECRET),
            verify=str(self.stack.ca_file),
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        facts: dict[str, object] = answer.json()
        return facts


@pytest.fixture
def mcp_oauth(tmp_path: Path, oauth_stack: OAuthStack) -> Iterator[McpOAuth]:
    directory = tmp_path / "mcp"
    directory.mkdir()
    ca = make_test_ca(directory, [HOST])
    listener = socket.create_server(("127.0.0.1", 0))
    authority = f"127.0.0.1:{listener.getsockname()[1]}"
    introspector = Introspector(
        oauth_stack.server.introspection_url, RESOURCE_CLIENT, RESOURCE_SECRET, oauth_stack.ca_file
    )
    server = McpServer(ca.context, IntrospectedTokens(introspector, f"https://{authority}"), HOST, listener=listener)
    env = make_env(tmp_path)
    # The instance talks to the authorisation server with its CA; the proxy trusts the MCP server's CA upstream.
    env.add_provider("oauth", {**oauth_stack.table(proxy_hosts=[authority]), "upstream_ca_file": str(ca.cert_file)})
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
              - provider: oauth
                scopes: ["issues:read", "pulls:write"]
        """
    )
    with server:
        try:
            yield McpOAuth(env, oauth_stack, server, ca.cert_file, authority)
        finally:
            env.cleanup()


def test_the_sdk_client_uses_an_oauth_protected_mcp_server_within_the_rule_and_never_holds_the_token(
    mcp_oauth: McpOAuth,
) -> None:
    code, stdout, stderr = mcp_oauth.run()
    assert code == 0, stdout + stderr
    ledger = mcp_oauth.stack.ledger
    [access] = [token for token in ledger.tokens.values() if token.kind == "access_token"]
    assert access.resources == (f"https://{mcp_oauth.authority}",) and access.scope == "issues:read"
    # The client listed the allowed tools alone, called them, and got the proxy's -32001 for the refused ones.
    found = [json.loads(line) for line in stdout.splitlines() if line.startswith('{"tools"')]
    assert len(found) == len(MODES), stdout + stderr
    for agent in found:
        check_agent(agent)
        assert "merge_pull_request" not in agent["tools"] and "delete_file" not in agent["tools"]
        assert agent["merge"]["error"]["code"] == -32001
    # What reached the server is what the rule allows, each request with the access token its introspection took.
    reached = mcp_oauth.server.calls()
    called = [(s.method, s.name) for s in reached if s.method in ("tools/call", "resources/read", "prompts/get")]
    assert called == len(MODES) * REACHED_CALLS
    assert {seen.bearer for seen in reached} == {access.value}
    # The sandbox held a placeholder: the token is in none of its files, its environment, or what the client printed.
    placeholder = next(line.split("=", 1)[1] for line in stdout.splitlines() if line.startswith("placeholder="))
    assert placeholder and placeholder != access.value
    env_part, files_part = stdout.split("\n--- env\n", 1)[1].split("\n--- files\n", 1)
    assert f"MCP_TOKEN={placeholder}" in env_part.splitlines() and placeholder in files_part
    log = mcp_oauth.env.log_path.read_text()
    for token in ledger.tokens.values():  # the access token, and the refresh token before and after its rotation
        assert token.value not in stdout + stderr and token.value not in log
    # The session revoked the token when it ended: the authorisation server says so, and the MCP server refuses it.
    assert mcp_oauth.introspect(access.value) == {"active": False}
    assert mcp_oauth.direct(access.value) == 401
    assert mcp_oauth.direct(placeholder) == 401
    assert mcp_oauth.direct(mcp_oauth.fresh_token()) == 200  # what a live token for the MCP server gets
    events = mcp_oauth.env.events()
    assert events.count("credential.issued") == 1 and "credential.revoked" in events
    # One egress.request record per MCP request: the allowed ones are what reached the server, in order, with the
    # credential put in; the refused ones never reached it and carried none.
    records = [r for r in mcp_oauth.env.log_records() if r["event"] == "egress.request"]
    assert records and all(r["operations"] == "mcp" and r["rule"] == RULE_ID for r in records)
    assert {r["method"] for r in records} <= {"POST", "GET", "DELETE"}  # GET, DELETE: a session's stream, its end
    posts = [r for r in records if r["method"] == "POST"]
    allowed = [r for r in posts if r["decision"] == "allowed"]
    assert [r["mcp_method"] for r in allowed] == [seen.method for seen in reached]
    assert {r["credential"] for r in allowed} == {"mcp"}
    refused = [r for r in posts if r["decision"] == "refused"]
    assert [(r["mcp_method"], r["mcp_name"]) for r in refused] == len(MODES) * [
        ("tools/call", "create_pull_request"),
        ("tools/call", "merge_pull_request"),
        ("resources/read", "repo://other-org/vault/README.md"),
        ("prompts/get", "leak_secrets"),
    ]
    assert {(r["credential"], r["upstream_status"]) for r in refused} == {(None, None)}
    assert mcp_oauth.env.run("audit", "verify").code == 0
