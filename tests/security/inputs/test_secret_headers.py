"""The header a ``kind: secret`` goes in is the grant's to allow (``secret_headers``), never the manifest's alone.

The manifest is the agent's. A grant binds the KV paths and the hosts; if the
manifest alone chose the header, the agent could have the proxy put the key
into ``User-Agent``, ``Referer`` or ``Cookie``, which services log, forward
to third parties or reflect transformed (past the answer masker). Through the
real ``broker policy check`` and ``broker exec`` (a proxied secret is issued
only there): a header the grant does not list is denied (exit 3, naming
``secret_headers``) before anything is read from Vault or run; a grant without ``secret_headers`` allows only ``Authorization:
Bearer {}``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv, make_env

HOST = "api.openai.com:443"


def policy(headers: str = "") -> str:
    return f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["{HOST}"]
    grants:
      - provider: vault
        secret_paths: ["llm/*"]
        secret_hosts: ["{HOST}"]{headers}
"""


def task(header: str) -> str:
    return f"""
version: 1
task: fix-1
sandbox: {{uid: 1000, gid: 1000}}
network:
  allow: ["{HOST}"]
credentials:
  - name: openai
    provider: vault
    kind: secret
    path: llm/openai
    field: api_key
    inject: proxy
    hosts: ["{HOST}"]
    header: {header!r}
    env: OPENAI_API_KEY
"""


@pytest.fixture
def env(tmp_path: Path) -> BrokerEnv:
    env = make_env(tmp_path)
    # Nothing listens there: a denial must come before any read of the secret.
    env.add_provider("vault", {"type": "vault", "addr": "http://127.0.0.1:1", "token_file": "t"})
    env.write_policy(policy())
    return env


@pytest.mark.parametrize(
    "header",
    ["User-Agent: {}", "Referer: https://attacker.example/{}", "Cookie: a={}", "X-Forwarded-For: {}", "x-api-key: {}"],
)
def test_a_header_the_grant_does_not_list_is_denied_by_policy_check_and_exec(env: BrokerEnv, header: str) -> None:
    path = env.write_task(task(header))
    reason = f"secret header {header!r} is not granted (secret_headers)"
    checked = env.run("policy", "check", "--task", str(path), "--json")
    assert checked.code == 3, checked.stderr
    assert reason in checked.stdout and "secret_headers" in checked.stderr
    ran = env.run("exec", "--task", str(path), "--", "echo", "ran")
    assert ran.code == 3, ran.stdout + ran.stderr
    assert reason in ran.stderr and not ran.stdout


def test_a_grant_without_secret_headers_allows_only_authorization_bearer(env: BrokerEnv) -> None:
    for header in ("Authorization: Bearer {}", "authorization: bearer {}"):
        checked = env.run("policy", "check", "--task", str(env.write_task(task(header))))
        assert checked.code == 0, checked.stderr
    denied = env.run("policy", "check", "--task", str(env.write_task(task("Authorization: Basic {}"))))
    assert denied.code == 3 and "'Authorization: Basic {}' is not granted (secret_headers)" in denied.stderr


def test_the_headers_a_grant_lists_are_the_only_ones_allowed(env: BrokerEnv) -> None:
    env.write_policy(policy('\n        secret_headers: ["x-api-key: {}"]'))
    assert env.run("policy", "check", "--task", str(env.write_task(task("X-Api-Key: {}")))).code == 0
    for header in ("Authorization: Bearer {}", "User-Agent: {}", "x-api-key: {}-suffix"):
        checked = env.run("policy", "check", "--task", str(env.write_task(task(header))))
        assert checked.code == 3 and "secret_headers" in checked.stderr, (header, checked.stderr)
