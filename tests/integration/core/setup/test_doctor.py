"""``broker doctor`` against the local stack: every check passes on a fresh ``init`` with OpenBao, moto and the
GitHub App emulator, and each provider problem (missing Vault capabilities, a login whose tokens would inherit
its entity, a stopped OpenBao) is named with its fix.
"""

from __future__ import annotations

import pytest

from broker.cli.ops.doctor import FIX_MARK
from devstack.github_app import GitHubAppEmulator
from tests.fixtures.aws import REGION, AwsRole
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.github import APP_ID, AppKeys, write_key
from tests.fixtures.install import BASE_CHECKS, append_providers, enable_default_policy, lines_by_name, vault_table
from tests.fixtures.net import closed_port
from tests.fixtures.openbao import CHILD_ROLE, OpenBao, admin_approle, approle_table

STACK_CHECKS = [
    *BASE_CHECKS,
    "providers.vault.login",
    "providers.vault.capabilities",
    "providers.vault.entity",
    "providers.vault.clock",
    "providers.aws.identity",
    "providers.aws.clock",
    "providers.github.app",
    "providers.github.installations",
    "providers.github.clock",
]
CANARY_TOKEN = "hvs.doctor-canary-never-printed"


# -- doctor: the whole stack -------------------------------------------------------------


@pytest.mark.server
def test_init_then_doctor_against_the_local_stack_passes_every_check(
    installed: BrokerEnv,
    openbao: OpenBao,
    aws_role: AwsRole,
    github_emulator: GitHubAppEmulator,
    github_app_keys: AppKeys,
) -> None:
    key = write_key(installed.root / "github-app.pem", github_app_keys.private_pem)
    append_providers(
        installed,
        {
            "vault": vault_table(installed, openbao.addr),
            "aws": {"type": "aws_sts", "region": REGION, "endpoint_url": aws_role.endpoint_url},
            "github": {
                "type": "github_app",
                "app_id": str(APP_ID),
                "private_key_file": str(key),
                "api_url": github_emulator.api_url,
            },
        },
    )
    enable_default_policy(installed)
    assert installed.run("policy", "lint").code == 0
    accessors = set(openbao.accessors())

    result = installed.run("doctor")
    assert (result.code, result.stderr) == (0, ""), result.stdout
    lines = lines_by_name(result)
    assert list(lines) == STACK_CHECKS
    assert all(line.startswith("✓ ") and FIX_MARK not in line for line in lines.values())
    assert "1 rule(s) in 1 file(s)" in lines["policy"]
    assert "a tmpfs is mounted per session" in lines["runtime_dir"]
    assert "noswap" in lines["runtime_dir"]  # with it, or why not
    assert "auth/token/create/broker-session: root" in lines["providers.vault.capabilities"]
    assert "arn:aws:sts::123456789012:" in lines["providers.aws.identity"]
    assert "1 installation(s): octo-org" in lines["providers.github.installations"]

    report = installed.run("doctor", "--json")
    assert report.code == 0
    document = report.json()
    assert document["ok"] is True and document["config"] == str(installed.config_path)
    assert [c["name"] for c in document["checks"]] == STACK_CHECKS
    for check in document["checks"]:
        assert set(check) == {"name", "ok", "detail", "fix"}
        assert check["ok"] is True and check["fix"] is None and check["detail"]

    # Doctor minted nothing anywhere (tokens earlier tests left may expire meanwhile: nothing new is the check).
    assert set(openbao.accessors()) <= accessors
    assert github_emulator.calls_to("create_token") == []
    assert {c.route for c in github_emulator.calls} == {"get_app", "list_installations"}


@pytest.mark.server
def test_doctor_names_missing_vault_capabilities(installed: BrokerEnv, openbao: OpenBao) -> None:
    weak = openbao.client().auth.token.create(policies=["ci-read"], ttl="10m")["auth"]
    try:
        append_providers(installed, {"vault": vault_table(installed, openbao.addr, weak["client_token"])})
        enable_default_policy(installed)
        result = installed.run("doctor")
    finally:
        openbao.client().auth.token.revoke_accessor(weak["accessor"])
    assert result.code == 2
    lines = lines_by_name(result)
    assert lines["providers.vault.login"].startswith("✓ ") and "policies ci-read" in lines["providers.vault.login"]
    capabilities = lines["providers.vault.capabilities"]
    assert capabilities.startswith("✗ ") and "lacks update on auth/token/create/broker-session" in capabilities
    assert "— fix: grant it in the broker's Vault policy" in capabilities
    assert weak["client_token"] not in result.stdout + result.stderr


@pytest.mark.server
@pytest.mark.parametrize(
    ("token_role", "ok", "fragment"),
    [
        (CHILD_ROLE, False, f"token role {CHILD_ROLE} is not orphan=true: session tokens would inherit it"),
        ("broker-session", True, "token role broker-session makes orphans, which do not inherit it"),
        (None, True, "session tokens are orphans from create-orphan and do not inherit it"),
    ],
    ids=["non-orphan-role", "orphan-role", "create-orphan"],
)
def test_doctor_flags_a_login_whose_session_tokens_would_inherit_its_entity(
    installed: BrokerEnv, openbao: OpenBao, token_role: str | None, ok: bool, fragment: str
) -> None:
    login = admin_approle(openbao)
    append_providers(installed, {"vault": approle_table(installed, openbao, login, token_role)})
    enable_default_policy(installed)
    accessors = set(openbao.accessors())
    result = installed.run("doctor")
    lines = lines_by_name(result)
    assert lines["providers.vault.capabilities"].startswith("✓ ")
    entity = lines["providers.vault.entity"]
    assert entity.startswith("✓ " if ok else "✗ "), entity
    assert f"the broker's login has entity {login.entity_id!r} (identity policies prod-admin)" in entity
    assert fragment in entity
    assert result.code == (0 if ok else 2), result.stdout
    if not ok:
        assert entity.endswith(f"— fix: set orphan=true on token role {CHILD_ROLE}")
    # Doctor logged in (one new AppRole token) and minted no session token.
    new = [openbao.lookup(a) for a in set(openbao.accessors()) - accessors]
    assert [facts["path"] for facts in new] == ["auth/approle/login"]


@pytest.mark.server
def test_doctor_fails_when_it_cannot_read_the_token_role_of_a_login_with_an_entity(
    installed: BrokerEnv, openbao: OpenBao
) -> None:
    login = admin_approle(openbao, without="auth/token/roles/*")
    append_providers(installed, {"vault": approle_table(installed, openbao, login, "broker-session")})
    enable_default_policy(installed)
    result = installed.run("doctor")
    assert result.code == 2
    entity = lines_by_name(result)["providers.vault.entity"]
    assert entity.startswith("✗ ") and "cannot tell whether token_role broker-session makes orphans" in entity
    assert entity.endswith("— fix: grant read on auth/token/roles/broker-session in the broker's Vault policy")


# -- doctor: what it reports when something is wrong -------------------------------------


def test_doctor_against_a_stopped_openbao_reports_the_provider_and_every_other_check(installed: BrokerEnv) -> None:
    append_providers(installed, {"vault": vault_table(installed, f"http://127.0.0.1:{closed_port()}", CANARY_TOKEN)})
    enable_default_policy(installed)
    result = installed.run("doctor")
    assert result.code == 2
    assert result.stderr == "broker: error: doctor: 1 of 7 checks failed\n"
    lines = lines_by_name(result)
    assert list(lines) == [*BASE_CHECKS, "providers.vault.login"]
    assert all(lines[name].startswith("✓ ") for name in BASE_CHECKS)
    login = lines["providers.vault.login"]
    assert login.startswith("✗ providers.vault.login: vault vault: token lookup-self failed: cannot reach")
    assert "— fix: check addr and the broker's token or AppRole files in [providers.vault]" in login
    assert CANARY_TOKEN not in result.stdout + result.stderr and "Traceback" not in result.stderr

    document = installed.run("doctor", "--json").json()
    assert document["ok"] is False
    failed = [c for c in document["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["providers.vault.login"] and "check addr" in failed[0]["fix"]
