"""``kind: secret``: strict manifests and grants, denial by default, what ``policy check`` says.

No Vault is contacted here: every refusal happens before anything is read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv, make_env

HOST = "api.openai.com:443"
CREDENTIAL = """
  - name: openai
    provider: vault
    kind: secret
    path: llm/openai
    field: api_key
    inject: proxy
    hosts: ["api.openai.com:443"]
    header: "Authorization: Bearer {}"
    env: OPENAI_API_KEY
"""


def policy(grant: str, network: str = f'["{HOST}"]') -> str:
    return f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: {network}
    grants:
      - provider: vault
{grant}
"""


GRANT = f'        secret_paths: ["llm/*"]\n        secret_hosts: ["{HOST}", "*.anthropic.com:443"]'
HEADERS = '\n        secret_headers: ["Authorization: Bearer {}", "x-api-key: {}"]'


def task(credential: str = CREDENTIAL, allow: str = f'["{HOST}"]') -> str:
    return f"""
version: 1
task: fix-1
sandbox: {{uid: 1000, gid: 1000}}
network:
  allow: {allow}
credentials:{credential}"""


@pytest.fixture
def env(tmp_path: Path) -> BrokerEnv:
    env = make_env(tmp_path)
    env.add_provider("vault", {"type": "vault", "addr": "http://127.0.0.1:1", "token_file": "t"})
    env.write_policy(policy(GRANT))
    return env


def check(env: BrokerEnv, text: str, *flags: str) -> tuple[int, str, str]:
    result = env.run("policy", "check", "--task", str(env.write_task(text)), *flags)
    return result.code, result.stdout, result.stderr


def test_a_granted_secret_is_allowed_and_policy_check_explains(env: BrokerEnv) -> None:
    code, out, _ = check(env, task())
    assert code == 0 and "openai: allowed by rule agents" in out
    anthropic = CREDENTIAL.replace("api.openai.com", "api.anthropic.com").replace(
        "Authorization: Bearer {}", "x-api-key: {}"
    )
    env.write_policy(policy(GRANT + HEADERS, '["*.anthropic.com:443"]'))
    assert check(env, task(anthropic, '["api.anthropic.com:443"]'))[0] == 0


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (("path: llm/openai", "path: prod/db"), "vault secret path 'prod/db' is not granted (secret_paths)"),
        (("path: llm/openai", "path: llm/a/b"), "vault secret path 'llm/a/b' is not granted (secret_paths)"),
        (("api.openai.com:443", "evil.example.com:443"), "secret host 'evil.example.com:443' is not granted"),
        (("api.openai.com:443", "api.openai.com:8443"), "secret host 'api.openai.com:8443' is not granted"),
    ],
)
def test_a_path_or_host_beyond_the_grant_is_denied(env: BrokerEnv, change: tuple[str, str], reason: str) -> None:
    text = task(CREDENTIAL.replace(*change), f'["{HOST}", "evil.example.com:443", "api.openai.com:8443"]')
    env.write_policy(policy(GRANT, f'["{HOST}", "evil.example.com:443", "api.openai.com:8443"]'))
    code, out, err = check(env, text, "--json")
    assert code == 3, err
    assert any(reason in line for line in out.splitlines()), out
    assert reason.split(" is not")[0] in err  # the one-line denial names it too


def test_deny_by_default_a_grant_without_secret_paths_allows_no_secret(env: BrokerEnv) -> None:
    env.write_policy(policy('        policies: ["ci-*"]'))
    code, out, _ = check(env, task(), "--json")
    assert code == 3 and "vault secret path 'llm/openai' is not granted (secret_paths)" in out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("    inject: proxy\n", ""), "credentials[0].inject: a vault secret goes only by the proxy (inject: proxy)"),
        (("    inject: proxy\n", "    inject: file\n"), "goes only by the proxy (inject: proxy)"),
        (("Bearer {}", "Bearer"), "credentials[0].header: must hold {} (where the secret goes) exactly once"),
        (("Bearer {}", "{} {}"), "exactly once"),
        (('"Authorization: Bearer {}"', '"Host: {}"'), "credentials[0].header: host is the connection's own header"),
        (('"Authorization: Bearer {}"', '"X Key: {}"'), "credentials[0].header:"),
        (("api.openai.com:443", "*.openai.com:443"), "credentials[0].hosts[0]:"),
        (("api.openai.com:443", "API.openai.com:443"), "credentials[0].hosts[0]:"),
        (('["api.openai.com:443"]', '["api.anthropic.com:443"]'), "network.allow must list api.anthropic.com:443"),
        (("env: OPENAI_API_KEY", "env: PATH"), "credentials[0].env: PATH is set by the broker"),
        (("env: OPENAI_API_KEY", "env: LD_PRELOAD"), "credentials[0].env: LD_PRELOAD is set by the broker"),
        (("env: OPENAI_API_KEY", "env: BROKER_X"), "credentials[0].env: BROKER_X is set by the broker"),
        (("env: OPENAI_API_KEY", "env: lower"), "credentials[0].env: variable names are upper-case"),
        (("path: llm/openai", "path: llm/../prod"), "credentials[0].path:"),
        (("field: api_key", "field: ''"), "credentials[0].field:"),
        (("field: api_key", "field: api_key\n    policies: [x]"), "credentials[0].policies: unknown key"),
    ],
)
def test_a_malformed_secret_credential_is_one_line_naming_its_key(
    env: BrokerEnv, change: tuple[str, str], message: str
) -> None:
    code, _, err = check(env, task(CREDENTIAL.replace(*change)))
    assert code == 2
    assert message in err and err.count("\n") == 1, err


def test_two_credentials_cannot_name_one_variable(env: BrokerEnv) -> None:
    second = CREDENTIAL.replace("name: openai", "name: other")
    code, _, err = check(env, task(CREDENTIAL + second))
    assert code == 2 and "credentials[1].env: OPENAI_API_KEY is named by another credential" in err


@pytest.mark.parametrize(
    ("grant", "message"),
    [
        ('        secret_paths: ["llm/*"]', "grants[0].secret_paths: needs secret_hosts"),
        (f'        policies: [ci-read]\n        secret_hosts: ["{HOST}"]', "grants[0].secret_hosts: only goes with"),
        ('        secret_paths: ["llm/*"]\n        secret_hosts: ["https://x.com"]', "grants[0].secret_hosts[0]:"),
        (f"        policies: [ci-read]{HEADERS}", "grants[0].secret_headers: only goes with secret_paths"),
        (GRANT + '\n        secret_headers: ["User-Agent"]', "grants[0].secret_headers[0]:"),
        (GRANT + '\n        secret_headers: ["x-key: {} {}"]', "grants[0].secret_headers[0]: must hold {}"),
        (GRANT + '\n        secret_headers: ["Host: {}"]', "grants[0].secret_headers[0]: host is the connection's"),
        (GRANT + "\n        secret_headers: []", "grants[0].secret_headers: needs at least 1 item"),
        ('        secret_paths: ["/llm"]\n        secret_hosts: ["x.com:443"]', "grants[0].secret_paths[0]:"),
    ],
)
def test_a_malformed_grant_is_one_line_naming_its_key(env: BrokerEnv, grant: str, message: str) -> None:
    env.write_policy(policy(grant))
    result = env.run("policy", "lint")
    assert result.code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr
