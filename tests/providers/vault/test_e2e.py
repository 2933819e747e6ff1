"""The spine end to end with a real OpenBao: manifest -> policy -> mint -> tmpfs -> log -> revoke."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import hvac
import pytest

from broker.host import mounts
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.net import closed_port
from tests.fixtures.openbao import CHILD_ROLE, VAULT_TASK, OpenBao, admin_approle, approle_table

pytestmark = pytest.mark.server


def issue(env: BrokerEnv, task: str = VAULT_TASK) -> dict[str, Any]:
    result = env.run("issue", "--task", str(env.write_task(task)), "--json")
    assert result.code == 0, result.stderr
    document: dict[str, Any] = result.json()
    return document


def test_issue_mints_exactly_the_requested_token(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    document = issue(vault_env)
    session = str(document["session"])
    record = next(r for r in vault_env.log_records() if r["event"] == "credential.issued")
    facts = openbao.lookup(record["reference"]["accessor"])
    assert sorted(facts["policies"]) == ["ci-read"]  # no default policy, nothing else
    assert facts["num_uses"] == 5
    assert 590 <= int(facts["ttl"]) <= 600  # 10m, capped by the manifest
    assert facts["explicit_max_ttl"] == 600
    assert facts["renewable"] is False
    assert facts["orphan"] is True  # minted through the orphan token role
    assert facts["meta"] == {
        "broker_session": session,
        "broker_task": "fix-build-7",
        "broker_credential": "kv",
    }
    openbao.client().secrets.kv.v2.create_or_update_secret(path="ci/build", secret={"answer": "42"})
    token = (Path(str(document["dir"])) / "kv" / "token").read_text()
    read = openbao.client(token).secrets.kv.v2.read_secret_version(path="ci/build", raise_on_deleted_version=True)
    assert read["data"]["data"] == {"answer": "42"}  # the token works for what ci-read allows
    with pytest.raises(hvac.exceptions.Forbidden):  # and for nothing else
        openbao.client(token).secrets.kv.v2.create_or_update_secret(path="ci/build", secret={"x": "y"})


def test_session_directory_is_a_sealed_tmpfs_owned_by_the_sandbox(vault_env: BrokerEnv) -> None:
    document = issue(vault_env)
    directory = Path(str(document["dir"]))
    assert directory.parent == vault_env.runtime_dir
    assert mounts.is_tmpfs(directory)
    if os.geteuid() == 0:
        assert mounts.is_mount_point(directory)
        options = next(line for line in Path("/proc/self/mounts").read_text().splitlines() if f" {directory} " in line)
        assert {"nosuid", "nodev", "noexec"} <= set(options.split()[3].split(","))
    for path, mode in [
        (directory, 0o500),
        (directory / "kv", 0o500),
        (directory / "kv" / "token", 0o400),
        (directory / "session.json", 0o400),
    ]:
        info = os.lstat(path)
        assert stat.S_IMODE(info.st_mode) == mode, path
        assert (info.st_uid, info.st_gid) == (1000, 1000), path
    assert sorted(os.listdir(directory)) == ["kv", "session.json"]
    assert os.listdir(directory / "kv") == ["token"]
    metadata = json.loads((directory / "session.json").read_text())
    assert metadata == document


def test_session_document_matches_the_spec(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    document = issue(vault_env)
    assert set(document) == {"session", "task", "expires_at", "dir", "mount_path", "credentials", "env"}
    assert document["mount_path"] == "/run/secrets"
    assert document["env"] == {"VAULT_ADDR": openbao.addr, "BROKER_SESSION": document["session"]}
    [credential] = document["credentials"]
    assert credential["files"] == ["kv/token"]
    assert credential["type"] == "vault"
    assert credential["scope"] == {"policies": ["ci-read"], "num_uses": 5}
    assert credential["expires_at"] <= document["expires_at"]


def test_revoke_revokes_at_openbao_and_wipes_the_directory(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    document = issue(vault_env)
    accessor = next(r for r in vault_env.log_records() if r["event"] == "credential.issued")["reference"]["accessor"]
    assert openbao.accessor_exists(accessor)
    result = vault_env.run("revoke", "--session", str(document["session"]), "--json")
    assert result.code == 0, result.stderr
    assert result.json() == {
        "session": document["session"],
        "credentials": [{"name": "kv", "provider": "vault", "outcome": "revoked"}],
        "dir_removed": True,
    }
    assert not openbao.accessor_exists(accessor)
    assert not os.path.lexists(str(document["dir"]))
    assert not mounts.is_mount_point(Path(str(document["dir"])))
    again = vault_env.run("revoke", "--session", str(document["session"]), "--json")
    assert again.code == 0 and again.json()["credentials"][0]["outcome"] == "revoked"
    events = vault_env.events()
    assert events.count("credential.revoked") == 1 and events.count("session.revoked") == 1


def test_revoke_by_task_ends_every_live_session_of_it(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    first, second = issue(vault_env), issue(vault_env)
    result = vault_env.run("revoke", "--task", "fix-build-7", "--json")
    assert result.code == 0, result.stderr
    assert sorted(r["session"] for r in result.json()) == sorted([first["session"], second["session"]])
    assert vault_env.run("status", "--json").json() == []
    assert not [
        a
        for a in (r["reference"]["accessor"] for r in vault_env.log_records() if r["event"] == "credential.issued")
        if openbao.accessor_exists(a)
    ]


def test_status_lists_live_sessions_and_with_all_the_ended_ones(vault_env: BrokerEnv) -> None:
    document = issue(vault_env)
    live = vault_env.run("status", "--json").json()
    assert [(s["session"], s["state"], s["task"]) for s in live] == [(document["session"], "active", "fix-build-7")]
    assert live[0]["credentials"][0] | {"expires_at": None} == {
        "name": "kv",
        "provider": "vault",
        "type": "vault",
        "state": "active",
        "expires_at": None,
    }
    vault_env.run("revoke", "--session", str(document["session"]))
    assert vault_env.run("status", "--json").json() == []
    ended = vault_env.run("status", "--all", "--json").json()
    assert [(s["state"], s["credentials"][0]["state"]) for s in ended] == [("revoked", "revoked")]


def test_denied_request_mints_nothing_and_is_logged(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    before = set(openbao.accessors())
    task = VAULT_TASK.replace("[ci-read]", "[ci-read, prod-admin]")
    result = vault_env.run("issue", "--task", str(vault_env.write_task(task)))
    assert result.code == 3
    assert result.stderr.count("\n") == 1 and "prod-admin" in result.stderr
    assert set(openbao.accessors()) == before
    assert vault_env.session_dirs() == []
    denied = [r for r in vault_env.log_records() if r["event"] == "session.denied"]
    assert len(denied) == 1 and "prod-admin" in " ".join(denied[0]["reasons"])
    assert vault_env.events()[-1] == "checkpoint"


def test_unknown_task_is_denied_by_default(vault_env: BrokerEnv) -> None:
    result = vault_env.run(
        "issue", "--task", str(vault_env.write_task(VAULT_TASK.replace("fix-build-7", "deploy-prod")))
    )
    assert result.code == 3
    assert "no rule matches task 'deploy-prod'" in result.stderr


def test_provider_outage_during_issue_exits_4_and_leaves_nothing(vault_env: BrokerEnv) -> None:
    vault_env.providers["vault"]["addr"] = f"http://127.0.0.1:{closed_port()}"
    vault_env.write_config()
    result = vault_env.run("issue", "--task", str(vault_env.write_task(VAULT_TASK)))
    assert result.code == 4, result.stderr
    assert result.stderr.startswith("broker: error: vault vault: token create failed: cannot reach")
    assert vault_env.session_dirs() == []
    assert vault_env.run("status", "--json").json() == []
    ended = vault_env.run("status", "--all", "--json").json()
    assert [(s["state"], s["credentials"][0]["state"]) for s in ended] == [("failed", "failed")]


def test_second_credential_failing_rolls_back_the_first(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    """The token role refuses policies outside its allowed list: the first token must be revoked again."""
    vault_env.write_policy(
        """
        rules:
          - id: wide
            tasks: ["fix-*"]
            sandbox_uids: ["0-65534"]
            sandbox_gids: ["0-65534"]
            grants:
              - {provider: vault, policies: ["*"]}
        """
    )
    task = (
        VAULT_TASK
        + """
  - name: other
    provider: vault
    policies: [not-allowed-by-role]
"""
    )
    result = vault_env.run("issue", "--task", str(vault_env.write_task(task)))
    assert result.code == 4, result.stderr
    issued = [r for r in vault_env.log_records() if r["event"] == "credential.issued"]
    assert len(issued) == 1
    assert not openbao.accessor_exists(issued[0]["reference"]["accessor"])
    revoked = [r for r in vault_env.log_records() if r["event"] == "credential.revoked"]
    assert [(r["credential"], r["reason"], r["outcome"]) for r in revoked] == [("kv", "rollback", "revoked")]
    assert vault_env.session_dirs() == []


def test_approle_identity_mints_through_the_orphan_role(tmp_path: Path, openbao: OpenBao) -> None:
    from tests.fixtures.brokerenv import make_env

    root = openbao.client()
    if "approle/" not in root.sys.list_auth_methods()["data"]:
        root.sys.enable_auth_method("approle")
    root.sys.create_or_update_policy(
        "broker",
        """
        path "auth/token/create/broker-session" { capabilities = ["create", "update"] }
        path "auth/token/lookup-accessor" { capabilities = ["update"] }
        path "auth/token/revoke-accessor" { capabilities = ["update"] }
        """,
    )
    root.auth.approle.create_or_update_approle("credential-broker", token_policies=["broker"], token_ttl="20m")
    role_id = root.auth.approle.read_role_id("credential-broker")["data"]["role_id"]
    secret_id = root.auth.approle.generate_secret_id("credential-broker")["data"]["secret_id"]
    env = make_env(tmp_path)
    try:
        env.add_provider(
            "vault",
            {
                "type": "vault",
                "addr": openbao.addr,
                "token_role": "broker-session",
                "approle_role_id_file": str(env.write_secret("role-id", role_id)),
                "approle_secret_id_file": str(env.write_secret("secret-id", secret_id)),
            },
        )
        document = issue(env)
        accessor = next(r for r in env.log_records() if r["event"] == "credential.issued")["reference"]["accessor"]
        assert openbao.lookup(accessor)["orphan"] is True
        assert env.run("revoke", "--session", str(document["session"])).code == 0
        assert not openbao.accessor_exists(accessor)
    finally:
        env.cleanup()


def test_the_token_never_reaches_output_log_or_state(vault_env: BrokerEnv) -> None:
    document = issue(vault_env)
    token = (Path(str(document["dir"])) / "kv" / "token").read_text()
    outputs = [
        vault_env.run("status", "--all", "--json"),
        vault_env.run("revoke", "--session", str(document["session"])),
    ]
    for result in outputs:
        assert token not in result.stdout + result.stderr
    for path in vault_env.state_dir.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path


# -- the broker's identity never reaches a session token ------------------------------------


@pytest.mark.parametrize("token_role", [None, "broker-session"], ids=["create-orphan", "orphan-role"])
def test_session_token_does_not_inherit_the_brokers_entity(
    tmp_path: Path, openbao: OpenBao, token_role: str | None
) -> None:
    """The broker's AppRole entity is in a prod-admin group; a ci-read session token must not read prod."""
    from tests.fixtures.brokerenv import make_env

    login = admin_approle(openbao)
    env = make_env(tmp_path)
    try:
        env.add_provider("vault", approle_table(env, openbao, login, token_role))
        document = issue(env)
        accessor = next(r for r in env.log_records() if r["event"] == "credential.issued")["reference"]["accessor"]
        facts = openbao.lookup(accessor)
        assert facts["entity_id"] == ""
        assert not facts.get("identity_policies")
        assert sorted(facts["policies"]) == ["ci-read"] and facts["orphan"] is True
        token = (Path(str(document["dir"])) / "kv" / "token").read_text()
        with pytest.raises(hvac.exceptions.Forbidden):
            openbao.client(token).secrets.kv.v2.read_secret_version(path="prod/db", raise_on_deleted_version=True)
    finally:
        env.cleanup()


def test_a_session_token_carrying_the_brokers_entity_is_revoked_and_issue_exits_4(
    tmp_path: Path, openbao: OpenBao
) -> None:
    """Through a token role left at orphan=false OpenBao hands the broker's entity to the token: refused."""
    from tests.fixtures.brokerenv import make_env

    login = admin_approle(openbao)
    env = make_env(tmp_path)
    try:
        env.add_provider("vault", approle_table(env, openbao, login, CHILD_ROLE))
        result = env.run("issue", "--task", str(env.write_task(VAULT_TASK)), "--json")
        assert result.code == 4, result.stderr
        assert result.stdout == "" and result.stderr.count("\n") == 1
        message = result.stderr
        assert message.startswith("broker: error: vault vault: refused the new session token (accessor ")
        assert f"it carries entity {login.entity_id!r}" in message
        assert "it carries identity policies ['prod-admin']" in message
        assert "it is not an orphan" in message and message.endswith("; revoked it\n")
        accessor = message.split("(accessor ", 1)[1].split(")", 1)[0]
        assert not openbao.accessor_exists(accessor)  # revoked at OpenBao, not merely forgotten
        # Logged as withheld, with its fingerprint (audit lookup finds it), then revoked.
        [issued] = [r for r in env.log_records() if r["event"] == "credential.issued"]
        assert "refused the new session token" in issued["withheld"]
        assert issued["fingerprint"].startswith("hmac-sha256:")
        assert env.session_dirs() == []
        ended = env.run("status", "--all", "--json").json()
        assert [(s["state"], s["credentials"][0]["state"]) for s in ended] == [("failed", "revoked")]
    finally:
        env.cleanup()


def test_a_session_token_the_broker_cannot_look_up_is_revoked_and_issue_exits_4(
    tmp_path: Path, openbao: OpenBao
) -> None:
    """Without lookup-accessor the broker cannot tell what the token carries: it fails closed."""
    from tests.fixtures.brokerenv import make_env

    login = admin_approle(openbao, without="auth/token/lookup-accessor")
    env = make_env(tmp_path)
    try:
        env.add_provider("vault", approle_table(env, openbao, login, "broker-session"))
        result = env.run("issue", "--task", str(env.write_task(VAULT_TASK)))
        assert result.code == 4, result.stderr
        assert "it cannot be looked up (the broker needs update on auth/token/lookup-accessor)" in result.stderr
        assert result.stderr.endswith("; revoked it\n")
        accessor = result.stderr.split("(accessor ", 1)[1].split(")", 1)[0]
        assert not openbao.accessor_exists(accessor)
        assert env.session_dirs() == []
    finally:
        env.cleanup()
