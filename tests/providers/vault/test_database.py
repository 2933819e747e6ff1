"""Vault ``kind: database``: a PostgreSQL user per session, minted by OpenBao, dropped at revocation.

Real parts only: OpenBao's database engine against a real PostgreSQL with
scram-sha-256 password authentication. The minted user logs in from the
session's files alone; after ``revoke`` the login fails and the role is gone.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.vault_engines import Engines, lease_exists
from tests.security.canaries.scan import assert_no_vault_token_shapes, assert_nowhere, minted, run_all

__all__ = ["minted"]  # the fixture, used by name below

pytestmark = pytest.mark.server

DB_TASK = """
version: 1
task: fix-db-1
ttl: 20m
sandbox: {uid: 1000, gid: 1000, mount_path: /run/secrets}
credentials:
  - name: db
    provider: vault
    kind: database
    role: agent-ro
    ttl: 10m
"""


def issue(env: BrokerEnv, task: str = DB_TASK) -> dict[str, Any]:
    result = env.run("issue", "--task", str(env.write_task(task)), "--json")
    assert result.code == 0, result.stderr
    document: dict[str, Any] = result.json()
    return document


def connect_from_files(directory: Path) -> psycopg.Connection[Any]:
    """Log in the way a client in the sandbox would: the dsn file, its passfile at the host path."""
    dsn = (directory / "dsn").read_text().strip()
    assert "password" not in dsn
    return psycopg.connect(dsn, passfile=str(directory / "pgpass"), sslmode="disable", connect_timeout=10)


def issued_record(env: BrokerEnv) -> dict[str, Any]:
    return next(r for r in env.log_records() if r["event"] == "credential.issued")


def test_the_minted_user_logs_in_from_the_files_alone(dynamic_env: BrokerEnv, engines: Engines) -> None:
    document = issue(dynamic_env)
    directory = Path(document["dir"]) / "db"
    assert sorted(os.listdir(directory)) == ["dsn", "password", "pgpass", "username"]
    for name in os.listdir(directory):
        info = os.lstat(directory / name)
        assert stat.S_IMODE(info.st_mode) == 0o400
        assert (info.st_uid, info.st_gid) == (1000, 1000)
    username = (directory / "username").read_text().strip()
    with connect_from_files(directory) as connection:
        row = connection.execute("SELECT current_user").fetchone()
    assert row == (username,)
    assert engines.postgres.role_exists(username)
    record = issued_record(dynamic_env)
    reference = record["reference"]
    assert reference["kind"] == "database"
    assert reference["lease_id"].startswith("database/creds/agent-ro/")
    assert reference["username"] == username
    assert lease_exists(engines.openbao, reference["lease_id"])
    holder = engines.openbao.lookup(reference["accessor"])
    assert holder["meta"]["broker_session"] == document["session"]
    assert sorted(holder["policies"]) == ["broker-dynamic"]
    assert 0 < int(holder["ttl"]) <= 600  # the lease dies with its holder, at the credential's ttl
    env = document["env"]
    assert env["PGPASSFILE"] == "/run/secrets/db/pgpass"
    assert (env["PGHOST"], env["PGPORT"], env["PGDATABASE"], env["PGUSER"]) == (
        engines.postgres.host,
        str(engines.postgres.port),
        "postgres",
        username,
    )
    assert "PGPASSWORD" not in env
    assert document["credentials"][0]["scope"] == {"kind": "database", "role": "agent-ro"}


def test_revoke_drops_the_user_and_the_login_fails(dynamic_env: BrokerEnv, engines: Engines) -> None:
    document = issue(dynamic_env)
    directory = Path(document["dir"]) / "db"
    dsn, pgpass = (directory / "dsn").read_text(), (directory / "pgpass").read_text()
    username = (directory / "username").read_text().strip()
    saved = dynamic_env.root / "saved"
    saved.mkdir()
    (saved / "dsn").write_text(dsn)
    (saved / "pgpass").write_text(pgpass)
    (saved / "pgpass").chmod(0o600)
    with connect_from_files(saved) as connection:
        assert connection.execute("SELECT 1").fetchone() == (1,)
    result = dynamic_env.run("revoke", "--session", document["session"], "--json")
    assert result.code == 0, result.stderr
    assert result.json()["credentials"] == [{"name": "db", "provider": "vault", "outcome": "revoked"}]
    assert not engines.postgres.role_exists(username)
    with pytest.raises(psycopg.OperationalError):
        connect_from_files(saved).close()
    reference = issued_record(dynamic_env)["reference"]
    assert not lease_exists(engines.openbao, reference["lease_id"])
    assert not engines.openbao.accessor_exists(reference["accessor"])


def test_a_database_role_outside_the_grant_is_denied_and_explained(dynamic_env: BrokerEnv, engines: Engines) -> None:
    task = dynamic_env.write_task(DB_TASK.replace("role: agent-ro", "role: admin"))
    check = dynamic_env.run("policy", "check", "--task", str(task), "--json")
    assert check.code == 3
    reasons = check.json()["credentials"][0]["reasons"]
    assert reasons == ["rule agents: vault database role 'admin' is not granted (database_roles)"]
    denied = dynamic_env.run("issue", "--task", str(task))
    assert denied.code == 3
    assert "vault database role 'admin' is not granted" in denied.stderr
    assert dynamic_env.events() == ["session.denied", "checkpoint"]


def test_a_grant_without_database_roles_grants_no_database_user(dynamic_env: BrokerEnv) -> None:
    dynamic_env.write_policy(
        """
        rules:
          - id: tokens-only
            tasks: ["fix-*"]
            sandbox_uids: ["0-65534"]
            sandbox_gids: ["0-65534"]
            grants:
              - {provider: vault, policies: ["*"]}
        """
    )
    check = dynamic_env.run("policy", "check", "--task", str(dynamic_env.write_task(DB_TASK)), "--json")
    assert check.code == 3
    assert "database_roles" in check.json()["credentials"][0]["reasons"][0]


ALL_KINDS_TASK = (
    DB_TASK
    + """
  - name: cert
    provider: vault
    kind: pki
    role: agent
    common_name: agent.ci.internal
  - name: host
    provider: vault
    kind: ssh
    role: agent
    principals: [git]
"""
)


def key_slices(path: Path) -> list[str]:
    """Pieces of a PEM or OpenSSH private key's body, long enough to be unmistakable."""
    body = "".join(path.read_text().strip().splitlines()[1:-1])
    return [body[i : i + 32] for i in range(0, len(body) - 32, 32)]


def test_the_password_never_reaches_output_log_or_state(dynamic_env: BrokerEnv, minted: set[str]) -> None:
    """Every secret of every dynamic kind (password, pgpass, certificate and SSH private keys)."""
    task = str(dynamic_env.write_task(ALL_KINDS_TASK))
    issued = [
        dynamic_env.run("--debug", "issue", "--task", task, "--json"),
        dynamic_env.run("--verbose", "issue", "--task", task, "--format", "env"),
    ]
    assert [r.code for r in issued] == [0, 0], [r.stderr for r in issued]
    first = issued[0].json()
    password = (Path(first["dir"]) / "db" / "password").read_text()
    assert password in minted
    keys = key_slices(Path(first["dir"]) / "cert" / "key.pem") + key_slices(Path(first["dir"]) / "host" / "id_ed25519")
    assert len(keys) >= 4
    results = issued + [
        *run_all(dynamic_env, "status", "--json"),
        *run_all(dynamic_env, "audit", "list", "--json"),
        *run_all(dynamic_env, "policy", "check", "--task", task, "--json"),
        dynamic_env.run("--debug", "--verbose", "revoke", "--task", "fix-db-1", "--json"),
        *run_all(dynamic_env, "sweep", "--json"),
    ]
    assert all(r.code == 0 for r in results), [(r.code, r.stderr) for r in results if r.code]
    assert dynamic_env.session_dirs() == []
    needles = [m for m in minted if len(m) >= 16] + keys  # a PEM's "==" padding line is no secret
    assert_nowhere(needles, results, dynamic_env.state_dir, dynamic_env.runtime_dir)
    assert_no_vault_token_shapes(results, dynamic_env.state_dir)
