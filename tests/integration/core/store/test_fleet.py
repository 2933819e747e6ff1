"""Fleet mode: the lifecycle on either store, and three broker hosts sharing one real PostgreSQL.

Each "host" is a separate broker installation (config, state, runtime dir,
audit key) whose ``store`` is the same PostgreSQL database; the providers
are the real OpenBao dev server and moto.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from broker.core.inputs.config import load_config
from broker.core.store import open_config_store
from broker.core.store.postgres.schema import SCHEMA_VERSION
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.crash import TWO_CREDENTIALS, add_slow_vault, issuing_session, start_issue, tokens_of, wait_for
from tests.fixtures.fleet import FleetDb, create_fleet_db, join_fleet, new_host
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.postgres import Postgres
from tests.fixtures.slowproxy import slow_proxy

pytestmark = pytest.mark.server

SHORT_TASK = VAULT_TASK.replace("ttl: 20m", "ttl: 2s").replace("    ttl: 10m\n", "")


@pytest.fixture
def fleet_db(postgres: Postgres, tmp_path: Path) -> FleetDb:
    return create_fleet_db(postgres, tmp_path)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_env(request: pytest.FixtureRequest, vault_env: BrokerEnv, tmp_path: Path) -> BrokerEnv:
    """The Vault broker of ``vault_env`` on the embedded store, then on a PostgreSQL one."""
    if request.param == "postgresql":
        join_fleet(vault_env, create_fleet_db(request.getfixturevalue("postgres"), tmp_path), "host-a")
    return vault_env


@pytest.fixture
def fleet(tmp_path: Path, openbao: OpenBao, fleet_db: FleetDb) -> Iterator[tuple[BrokerEnv, BrokerEnv, BrokerEnv]]:
    hosts = tuple(new_host(tmp_path, openbao, fleet_db, name) for name in ("host-a", "host-b", "host-c"))
    try:
        yield hosts  # type: ignore[misc]
    finally:
        for env in hosts:
            env.cleanup()


# -- the lifecycle on either store ---------------------------------------------------------


def test_issue_status_revoke_on_either_store(store_env: BrokerEnv, openbao: OpenBao) -> None:
    document = store_env.run("issue", "--task", str(store_env.write_task(VAULT_TASK)), "--json").json()
    session = document["session"]
    assert len(tokens_of(openbao, session)) == 1
    status = store_env.run("status", "--json").json()
    assert [(s["session"], s["state"]) for s in status] == [(session, "active")]
    assert [c["state"] for c in status[0]["credentials"]] == ["active"]
    result = store_env.run("revoke", "--session", session, "--json")
    assert result.code == 0, result.stderr
    assert result.json()["dir_removed"] is True
    assert tokens_of(openbao, session) == []
    assert store_env.session_dirs() == []
    assert store_env.run("status", "--all", "--json").json()[0]["state"] == "revoked"
    assert store_env.run("audit", "verify").code == 0


def test_an_expired_session_is_swept_on_either_store(store_env: BrokerEnv, openbao: OpenBao) -> None:
    document = store_env.run("issue", "--task", str(store_env.write_task(SHORT_TASK)), "--json").json()
    time.sleep(2.2)
    result = store_env.run("sweep", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["expired"] == [document["session"]]
    assert tokens_of(openbao, document["session"]) == []
    assert not os.path.lexists(document["dir"])
    assert store_env.run("status", "--all", "--json").json()[0]["state"] == "expired"


def test_sigkill_mid_issue_is_recovered_by_sweep_on_either_store(store_env: BrokerEnv, openbao: OpenBao) -> None:
    with slow_proxy(urlparse(openbao.addr).port or 0, delay=30) as proxy:
        add_slow_vault(store_env, proxy.addr)
        process = start_issue(store_env, store_env.write_task(TWO_CREDENTIALS))
        try:
            wait_for(lambda: bool(issuing_session(store_env)))
            session = issuing_session(store_env)
            wait_for(lambda: len(tokens_of(openbao, session)) == 2)
            busy = store_env.run("sweep", "--json").json()  # the issuing broker is alive: hands off
            assert busy["busy"] == [session] and len(tokens_of(openbao, session)) == 2
            process.send_signal(signal.SIGKILL)
            process.wait(10)
        finally:
            process.kill()
        proxy.delay = 0
        result = store_env.run("sweep", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["recovered"] == [session]
    assert tokens_of(openbao, session) == []
    assert store_env.session_dirs() == []
    assert store_env.run("status", "--all", "--json").json()[0]["state"] == "revoked"


# -- three hosts, one store -----------------------------------------------------------------


def test_issue_on_a_status_and_revoke_on_b_and_a_wipes_its_directory(
    fleet: tuple[BrokerEnv, BrokerEnv, BrokerEnv], openbao: OpenBao
) -> None:
    a, b, _ = fleet
    document = a.run("issue", "--task", str(a.write_task(VAULT_TASK)), "--json").json()
    session = document["session"]
    assert document["host"] == "host-a"
    status = b.run("status", "--json").json()
    assert [(s["session"], s["host"], s["state"]) for s in status] == [(session, "host-a", "active")]
    result = b.run("revoke", "--session", session, "--json")
    assert result.code == 0, result.stderr
    assert result.json()["dir_removed"] is False  # host-b never touches host-a's directory
    assert result.json()["dir_host"] == "host-a"
    assert tokens_of(openbao, session) == []
    assert a.session_dirs() == [session]
    assert a.run("status", "--all", "--json").json()[0]["state"] == "revoked"
    swept = a.run("sweep", "--json")  # host-b asked host-a to finish the session: its next sweep does
    assert swept.code == 0, swept.stderr
    assert swept.json()["asked"] == [session]
    assert a.session_dirs() == []


def test_revoke_task_on_b_reaches_every_host(fleet: tuple[BrokerEnv, BrokerEnv, BrokerEnv], openbao: OpenBao) -> None:
    a, b, c = fleet
    sessions = [
        env.run("issue", "--task", str(env.write_task(VAULT_TASK)), "--json").json()["session"] for env in (a, c)
    ]
    result = b.run("revoke", "--task", "fix-build-7", "--json")
    assert result.code == 0, result.stderr
    assert all(tokens_of(openbao, s) == [] for s in sessions)
    assert {s["session"]: s["state"] for s in c.run("status", "--all", "--json").json()} == dict.fromkeys(
        sessions, "revoked"
    )


def test_audit_active_on_b_lists_what_every_host_issued(
    fleet: tuple[BrokerEnv, BrokerEnv, BrokerEnv], openbao: OpenBao
) -> None:
    a, b, c = fleet
    issued = {
        env.run("issue", "--task", str(env.write_task(VAULT_TASK)), "--json").json()["session"]: host
        for env, host in ((a, "host-a"), (c, "host-c"))
    }
    active = b.run("audit", "active", "--json").json()
    assert {(item["session"], item["host"], item["credential"]) for item in active} == {
        (session, host, "kv") for session, host in issued.items()
    }
    first = next(iter(issued))
    assert b.run("revoke", "--session", first).code == 0
    assert [item["session"] for item in b.run("audit", "active", "--json").json()] == [s for s in issued if s != first]


def test_sweep_on_c_revokes_what_expired_on_a_and_leaves_a_its_directory(
    fleet: tuple[BrokerEnv, BrokerEnv, BrokerEnv], openbao: OpenBao
) -> None:
    a, _, c = fleet
    session = a.run("issue", "--task", str(a.write_task(SHORT_TASK)), "--json").json()["session"]
    time.sleep(2.2)
    result = c.run("sweep", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["expired"] == [session]
    assert tokens_of(openbao, session) == []
    assert a.session_dirs() == [session] and c.session_dirs() == []
    assert a.run("sweep", "--json").json()["orphans_removed"] == [session]
    assert a.session_dirs() == []


def test_a_host_killed_mid_issue_is_left_alone_while_alive_then_recovered_by_another(
    fleet: tuple[BrokerEnv, BrokerEnv, BrokerEnv], openbao: OpenBao
) -> None:
    """The session lock is an advisory lock: another host's sweep sees it held, then free once the holder dies."""
    a, _, c = fleet
    with slow_proxy(urlparse(openbao.addr).port or 0, delay=30) as proxy:
        for env in (a, c):
            add_slow_vault(env, proxy.addr)
        process = start_issue(a, a.write_task(TWO_CREDENTIALS))
        try:
            wait_for(lambda: bool(issuing_session(a)))
            session = issuing_session(a)
            wait_for(lambda: len(tokens_of(openbao, session)) == 2)
            busy = c.run("sweep", "--json").json()
            assert busy["busy"] == [session] and len(tokens_of(openbao, session)) == 2
            process.send_signal(signal.SIGKILL)
            process.wait(10)
        finally:
            process.kill()
        proxy.delay = 0
        result = c.run("sweep", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["recovered"] == [session]
    assert tokens_of(openbao, session) == []
    assert a.session_dirs() == [session]  # host-c leaves host-a's disk alone
    assert a.run("sweep", "--json").json()["orphans_removed"] == [session]
    assert a.session_dirs() == []


# -- the store itself -------------------------------------------------------------------------


def test_doctor_checks_connection_schema_and_clock(fleet: tuple[BrokerEnv, BrokerEnv, BrokerEnv]) -> None:
    a, _, _ = fleet
    checks = {c["name"]: c for c in a.run("doctor", "--json").json()["checks"]}
    assert checks["store.connection"]["ok"] is True
    assert (
        checks["store.schema"]["ok"] is True and f"schema version {SCHEMA_VERSION}" in checks["store.schema"]["detail"]
    )
    assert checks["store.clock"]["ok"] is True


def test_doctor_reports_an_unreachable_store_in_one_line(vault_env: BrokerEnv, fleet_db: FleetDb) -> None:
    join_fleet(vault_env, FleetDb("postgresql://postgres@127.0.0.1:1/nothing", fleet_db.passfile, "x"), "host-a")
    checks = {c["name"]: c for c in vault_env.run("doctor", "--json").json()["checks"]}
    assert checks["store.connection"]["ok"] is False
    assert "cannot connect" in checks["store.connection"]["detail"]
    result = vault_env.run("status")
    assert result.code == 2 and result.stderr.startswith("broker: error: session store postgresql://")
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres:hunter2@127.0.0.1/broker",
        "postgresql://postgres@127.0.0.1/broker?password=hunter2",
        "postgresql://postgres@127.0.0.1/broker?sslmode=disable&PassWord=hunter2",
    ],
)
def test_a_password_in_the_store_url_is_refused(vault_env: BrokerEnv, url: str) -> None:
    """In the user part or as a query parameter (libpq takes both): refused in the config and in --store."""
    vault_env.settings["store"] = url
    vault_env.write_config()
    result = vault_env.run("status")
    assert result.code == 2 and "store_passfile" in result.stderr and "hunter2" not in result.stderr
    del vault_env.settings["store"]
    vault_env.write_config()
    audited = vault_env.run("audit", "verify", "--store", url)
    assert audited.code == 2 and "no password in the URL" in audited.stderr and "hunter2" not in audited.stderr


def test_migrations_are_recorded_once_and_a_newer_schema_is_refused(
    fleet: tuple[BrokerEnv, BrokerEnv, BrokerEnv], fleet_db: FleetDb, postgres: Postgres
) -> None:
    a, b, _ = fleet
    for env in (a, b):
        open_config_store(load_config(env.config_path)).close()
    database = f"host={postgres.host} port={postgres.port} dbname={fleet_db.name}"
    import psycopg

    with psycopg.connect(f"{database} user=postgres password={postgres.password}", autocommit=True) as conn:
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_version ORDER BY version")]
        assert versions == list(range(1, SCHEMA_VERSION + 1))
        conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    result = a.run("status")
    assert result.code == 2 and "newer than this broker's" in result.stderr
