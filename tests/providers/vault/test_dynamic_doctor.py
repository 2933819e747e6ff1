"""``broker doctor`` checks what the granted dynamic kinds need, one line per kind with a fix.

Database users and certificates are asked for by the lease holder, so its
policies (``dynamic_policies``) must allow ``<mount>/creds/<role>`` and
``<mount>/issue/<role>`` for every granted role; SSH certificates are signed
with the broker's own token. The probe holder doctor creates is revoked at
once and holds no lease.
"""

from __future__ import annotations

import pytest

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.install import lines_by_name
from tests.fixtures.vault_engines import DYNAMIC_GRANTS, NO_KEY_ID_ROLE, Engines

pytestmark = pytest.mark.server

EXACT_ROLES = DYNAMIC_GRANTS.replace('database_roles: ["agent-*"]', 'database_roles: ["agent-ro"]')


def doctor_lines(env: BrokerEnv) -> dict[str, str]:
    return lines_by_name(env.run("doctor"))


def test_doctor_passes_the_dynamic_kinds_the_holder_and_the_broker_may_mint(
    dynamic_env: BrokerEnv, engines: Engines
) -> None:
    dynamic_env.write_policy(EXACT_ROLES)
    before = set(engines.openbao.accessors())
    lines = doctor_lines(dynamic_env)
    assert lines["providers.vault.dynamic.database"].startswith("✓ ")
    assert "may read database/creds/agent-ro" in lines["providers.vault.dynamic.database"]
    assert lines["providers.vault.dynamic.pki"].startswith("✓ ")
    assert "may update pki/issue/agent" in lines["providers.vault.dynamic.pki"]
    assert lines["providers.vault.dynamic.ssh"].startswith("✓ ")
    assert "broker's token may update ssh/sign/agent" in lines["providers.vault.dynamic.ssh"]
    assert "allow_user_key_ids is set on ssh/roles/agent" in lines["providers.vault.dynamic.ssh"]
    assert set(engines.openbao.accessors()) == before  # the probe holder is gone again


def test_doctor_names_a_granted_role_the_lease_holder_may_not_use(dynamic_env: BrokerEnv, engines: Engines) -> None:
    dynamic_env.write_policy(
        EXACT_ROLES.replace('database_roles: ["agent-ro"]', 'database_roles: ["agent-ro", "agent-rw"]').replace(
            'pki_roles: ["agent"]', 'pki_roles: ["agent-*"]'
        )
    )
    lines = doctor_lines(dynamic_env)
    database = lines["providers.vault.dynamic.database"]
    assert database.startswith("✗ ")
    assert "lacks read on database/creds/agent-rw" in database and "agent-ro," not in database
    assert '— fix: add path "database/creds/agent-rw" { capabilities = ["read"] }' in database
    assert "to dynamic_policies (broker-dynamic)" in database
    # A glob is asked literally: the holder's exact paths do not cover every role it allows.
    assert lines["providers.vault.dynamic.pki"].startswith("✗ ")
    assert "lacks update on pki/issue/agent-*" in lines["providers.vault.dynamic.pki"]


def test_doctor_says_when_the_lease_holder_cannot_be_created(dynamic_env: BrokerEnv, engines: Engines) -> None:
    dynamic_env.write_policy(EXACT_ROLES)
    dynamic_env.providers["vault"]["dynamic_policies"] = ["not-allowed-by-the-role"]
    dynamic_env.write_config()
    lines = doctor_lines(dynamic_env)
    for kind in ("database", "pki"):
        line = lines[f"providers.vault.dynamic.{kind}"]
        assert line.startswith("✗ ") and "the lease holder cannot be created" in line
        assert "— fix: let token role 'broker-session' grant not-allowed-by-the-role (allowed_policies)" in line
    assert lines["providers.vault.dynamic.ssh"].startswith("✓ ")  # signed with the broker's own token


def test_doctor_asks_for_dynamic_policies_when_dynamic_kinds_are_granted(dynamic_env: BrokerEnv) -> None:
    dynamic_env.write_policy(EXACT_ROLES)
    del dynamic_env.providers["vault"]["dynamic_policies"]
    dynamic_env.write_config()
    line = doctor_lines(dynamic_env)["providers.vault.dynamic.database"]
    assert (
        line.startswith("✗ ") and "dynamic_policies is not set — fix: set dynamic_policies in [providers.vault]" in line
    )


def test_doctor_has_no_dynamic_lines_without_dynamic_grants(dynamic_env: BrokerEnv) -> None:
    dynamic_env.write_policy(
        """
        rules:
          - {id: agents, tasks: ["fix-*"], sandbox_uids: ["0-65534"], sandbox_gids: ["0-65534"],
             grants: [{provider: vault, policies: ["ci-*"]}]}
        """
    )
    lines = doctor_lines(dynamic_env)
    assert "providers.vault.login" in lines
    assert not [name for name in lines if ".dynamic." in name]


@pytest.mark.parametrize("granted", [f'["agent", "{NO_KEY_ID_ROLE}"]', '["agent*"]'], ids=["named", "glob"])
def test_doctor_names_a_granted_ssh_role_without_allow_user_key_ids(
    dynamic_env: BrokerEnv, engines: Engines, granted: str
) -> None:
    """A glob grant is checked on every role it matches (listed), since each may be asked for."""
    dynamic_env.write_policy(EXACT_ROLES.replace('ssh_roles: ["agent"]', f"ssh_roles: {granted}"))
    result = dynamic_env.run("doctor")
    line = lines_by_name(result)["providers.vault.dynamic.ssh"]
    assert result.code != 0
    assert line.startswith("✗ ") and f"allow_user_key_ids is not set on ssh/roles/{NO_KEY_ID_ROLE}" in line
    assert "ssh/roles/agent," not in line and not line.endswith("ssh/roles/agent")  # the other role sets it
    assert f"— fix: set allow_user_key_ids=true on ssh/roles/{NO_KEY_ID_ROLE}" in line
