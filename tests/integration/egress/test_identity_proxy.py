"""A session token with ``inject: proxy``: the sandbox holds a placeholder, and the API behind the session's proxy
gets the broker's JWT, which verifies with the issuer's published keys for its audience and names the session.

The API is a recording TLS server on loopback; the sandbox (bubblewrap, its own network namespace) reaches it only
through the session's proxy, with curl and the placeholder alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.identity import IssuerServer, add_issuer
from tests.fixtures.recording_api import RecordingAPI
from tests.fixtures.sandbox import sandbox_unavailable
from tests.fixtures.tls import make_test_ca

pytestmark = [pytest.mark.root, pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable()))]
AUDIENCE = "https://api.example.test"


@dataclass
class Stack:
    env: BrokerEnv
    server: IssuerServer
    api: RecordingAPI


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    env = make_env(tmp_path)
    server = add_issuer(env)
    (tmp_path / "ca").mkdir()
    ca = make_test_ca(tmp_path / "ca", ["api.example.test"])
    api = RecordingAPI(ca.context)
    env.add_provider(
        "identity",
        {"type": "identity", "proxy_hosts": [f"127.0.0.1:{api.port}"], "upstream_ca_file": str(ca.cert_file)},
    )
    env.write_policy(
        f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["127.0.0.1:{api.port}"]
    grants:
      - provider: identity
        audiences: ["{AUDIENCE}"]
"""
    )
    try:
        yield Stack(env, server, api)
    finally:
        api.close()
        server.close()
        env.cleanup()


def test_the_api_gets_the_sessions_token_and_the_sandbox_only_its_placeholder(stack: Stack) -> None:
    task = stack.env.write_task(
        f"""
version: 1
task: fix-api-1
ttl: 5m
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
network:
  allow: ["127.0.0.1:{stack.api.port}"]
credentials:
  - {{name: api, provider: identity, audience: "{AUDIENCE}", inject: proxy}}
"""
    )
    ask = (
        "curl -sS --noproxy '' -H \"Authorization: Bearer $(cat /run/secrets/api/token)\""
        f" https://127.0.0.1:{stack.api.port}/v1/who"
    )
    script = f'echo "placeholder=$(cat /run/secrets/api/token)"; echo "answer=$({ask})"'
    argv = ["exec", "--task", str(task), "--sandbox", "bwrap", "--network", "allowlist"]
    result = stack.env.run_process(*argv, "--", "sh", "-c", script, timeout=120)
    assert result.code == 0, result.stderr
    values = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert json.loads(values["answer"]) == {"ok": True, "path": "/v1/who"}
    [seen] = stack.api.seen
    scheme, token = dict(seen.headers)["authorization"].split(" ", 1)
    assert scheme == "Bearer" and token != values["placeholder"]
    claims = stack.server.verify(token, AUDIENCE)  # the issuer's keys, its issuer, this audience, not expired
    assert claims["sub"].startswith("task:fix-api-1:session:s-") and claims["task"] == "fix-api-1"
    assert token not in result.stdout + result.stderr
    records = stack.env.log_records()
    [issued] = [r for r in records if r["event"] == "credential.issued" and r["credential"] == "api"]
    assert claims["jti"] in json.dumps(issued)  # the log names the token by its jti, never the token
    assert token not in json.dumps(records)
