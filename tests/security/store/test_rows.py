"""A bad row never stops the fleet: rows written straight into the store, next to sessions that really expired.

Whoever can write the store's database (the fleet's PostgreSQL, or the SQLite
file of one host) writes rows no broker would: a session id that climbs out of
the runtime directory, a state or a host no broker writes. ``sweep`` skips
each such row and everything it names, reports it under ``malformed``, records
it once in the issuance log (``store.malformed``) and sweeps every other
session; ``status``, ``revoke --task`` and ``audit active`` leave it out.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from broker.core.store import rows as store_rows
from broker.core.store.interface import CredentialRecord, SessionRecord
from broker.core.store.states import SessionState
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.crash import tokens_of
from tests.fixtures.fleet import create_fleet_db, join_fleet
from tests.fixtures.openbao import VAULT_TASK, OpenBao

pytestmark = pytest.mark.server

SHORT_TASK = VAULT_TASK.replace("ttl: 20m", "ttl: 2s").replace("    ttl: 10m\n", "")
TASK = "fix-build-7"
CLIMBER = "../victim-data"
UNKNOWN_STATE = "s-bbbbbbbbbbbb"
BAD_HOST = "s-cccccccccccc"
BAD_ROWS = {CLIMBER, UNKNOWN_STATE, BAD_HOST}


@pytest.fixture(params=["sqlite", "postgresql"])
def store_env(request: pytest.FixtureRequest, vault_env: BrokerEnv, tmp_path: Path) -> BrokerEnv:
    if request.param == "postgresql":
        join_fleet(vault_env, create_fleet_db(request.getfixturevalue("postgres"), tmp_path), "host-a")
    return vault_env


@contextmanager
def database(env: BrokerEnv) -> Iterator[Any]:
    """A connection of the store's own, outside the broker: the writer the broker must not trust."""
    if env.settings.get("store"):
        import psycopg

        url, passfile = str(env.settings["store"]), str(env.settings["store_passfile"])
        with psycopg.connect(url, passfile=passfile, autocommit=True, connect_timeout=10) as conn:
            yield conn
    else:
        local = sqlite3.connect(env.state_dir / "sessions.db", isolation_level=None)
        try:
            yield local
        finally:
            local.close()


def insert_session(env: BrokerEnv, session_id: str, *, state: str = "active", host: str | None = None) -> None:
    fleet = bool(env.settings.get("store"))
    past = datetime.now(UTC) - timedelta(hours=1)
    mark = "%s" if fleet else "?"
    values: dict[str, Any] = {
        "id": session_id,
        "host": host if host is not None else ("host-a" if fleet else ""),
        "task": TASK,
        "requester": "root",
        "state": state,
        "created_at": past if fleet else past.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "expires_at": past if fleet else past.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "dir": str(env.runtime_dir / session_id),
        "mount_path": "/run/secrets",
        "uid": 1000,
        "gid": 1000,
        "mounted": False if fleet else 0,
    }
    with database(env) as conn:
        sql = f"INSERT INTO sessions ({', '.join(values)}) VALUES ({', '.join([mark] * len(values))})"  # noqa: S608
        conn.execute(sql, tuple(values.values()))
        credential = "INSERT INTO credentials (session_id, name, provider, type, state, reference) VALUES "
        conn.execute(
            credential + f"({mark}, 'kv', 'vault', 'token', 'active', {mark})",
            (session_id, json.dumps({"accessor": "not-an-accessor"})),
        )


def planted(env: BrokerEnv) -> tuple[Path, Path]:
    """A file outside the runtime dir where the climbing id points, and a directory the bad-host row names."""
    env.runtime_dir.mkdir(mode=0o700, exist_ok=True)
    victim = env.runtime_dir.parent / "victim-data"
    victim.mkdir()
    (victim / "keep.txt").write_text("victim")
    named = env.runtime_dir / BAD_HOST  # provably a session directory (its session.json names it)
    named.mkdir(mode=0o700)
    (named / "session.json").write_text(json.dumps({"session": BAD_HOST}))
    return victim, named


def test_a_malformed_row_is_reported_and_skipped_and_every_expired_session_is_still_swept(
    store_env: BrokerEnv, openbao: OpenBao
) -> None:
    env = store_env
    expired = {env.run("issue", "--task", str(env.write_task(SHORT_TASK)), "--json").json()["session"] for _ in "ab"}
    victim, named = planted(env)
    insert_session(env, CLIMBER)
    insert_session(env, UNKNOWN_STATE, state="zombie")
    insert_session(env, BAD_HOST, host="../../etc")
    time.sleep(2.2)

    result = env.run("sweep", "--json")
    assert result.code == 0, result.stderr
    report = result.json()
    assert set(report["expired"]) == expired
    assert all(tokens_of(openbao, session) == [] for session in expired)
    rows = {(row["table"], row["row"]) for row in report["malformed"]}
    assert {("sessions", row) for row in BAD_ROWS} <= rows
    assert ("credentials", f"{CLIMBER}/kv") in rows
    problems = {row["row"]: " ".join(row["problems"]) for row in report["malformed"] if row["table"] == "sessions"}
    assert "is not a session id" in problems[CLIMBER]
    assert "'zombie' is not one the broker knows" in problems[UNKNOWN_STATE]
    assert "'../../etc' is not a host name" in problems[BAD_HOST]
    # nothing a bad row names was touched, inside the runtime dir or out of it
    assert (victim / "keep.txt").read_text() == "victim"
    assert (named / "session.json").exists()
    assert BAD_HOST not in report["orphans_removed"] + report["foreign"]

    # one issuance-log record per bad row, however often it is swept past
    records = [r for r in env.log_records() if r["event"] == "store.malformed"]
    assert sorted((r["table"], r["row"]) for r in records) == sorted(rows)
    assert all(r["session"] is None and len(r["digest"]) == 64 for r in records)
    again = env.run("sweep", "--json")
    assert again.code == 0, again.stderr
    assert {(row["table"], row["row"]) for row in again.json()["malformed"]} == rows
    assert [r for r in env.log_records() if r["event"] == "store.malformed"] == records
    assert env.run("audit", "verify").code == 0
    with database(env) as conn:  # the rows themselves are left as they were: the broker does not rewrite them
        states = dict(conn.execute("SELECT id, state FROM sessions WHERE task = 'fix-build-7'").fetchall())
    assert {states[row] for row in BAD_ROWS} == {"active", "zombie"}


def test_status_revoke_task_and_audit_active_leave_a_malformed_row_out(store_env: BrokerEnv, openbao: OpenBao) -> None:
    env = store_env
    live = env.run("issue", "--task", str(env.write_task(VAULT_TASK)), "--json").json()["session"]
    insert_session(env, CLIMBER)
    insert_session(env, UNKNOWN_STATE, state="zombie")
    insert_session(env, BAD_HOST, host="bad host\x1b[2J")

    for args in (("status", "--json"), ("status", "--all", "--json")):
        status = env.run(*args)
        assert status.code == 0, status.stderr
        assert [s["session"] for s in status.json()] == [live]
        assert "malformed row" in status.stderr and "\x1b" not in status.stderr
    active = env.run("audit", "active", "--json")
    assert active.code == 0, active.stderr
    assert {item["session"] for item in active.json()} == {live}
    revoked = env.run("revoke", "--task", TASK, "--json")
    assert revoked.code == 0, revoked.stderr
    assert [r["session"] for r in revoked.json()] == [live]
    assert tokens_of(openbao, live) == []
    unknown = env.run("revoke", "--session", BAD_HOST)
    assert unknown.code == 2 and "malformed row" in unknown.stderr


# -- the checks themselves ------------------------------------------------------------------------

GOOD = {
    "id": "s-aaaaaaaaaaaa",
    "host": "host-a",
    "task": TASK,
    "requester": "root",
    "state": "active",
    "created_at": "2026-01-01T00:00:00Z",
    "expires_at": datetime(2026, 1, 1, 1, tzinfo=UTC),
    "dir": "/run/broker/s-aaaaaaaaaaaa",
    "mount_path": "/run/secrets",
    "uid": 1000,
    "gid": 1000,
    "mounted": True,
    "document": None,
    "exec_bound": 0,
    "manifest": '{"json": false, "text": "task: x"}',
}


def test_a_well_formed_row_reads_as_it_was_written() -> None:
    record = store_rows.session_record(GOOD, shared=True)
    assert isinstance(record, SessionRecord)
    assert record.state is SessionState.ACTIVE and record.manifest == {"json": False, "text": "task: x"}
    assert record.expires_at - record.created_at == timedelta(hours=1)
    assert isinstance(store_rows.session_record({**GOOD, "host": ""}, shared=False), SessionRecord)


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("id", "../victim-data", "is not a session id"),
        ("id", "s-AAAAAAAAAAAA", "is not a session id"),
        ("id", 7, "is not a session id"),
        ("state", "zombie", "is not one the broker knows"),
        ("state", None, "is not one the broker knows"),
        ("host", "", "is not a host name"),  # a shared store's rows always name their host
        ("host", "a/b", "is not a host name"),
        ("host", "x" * 65, "is not a host name"),
        ("uid", -1, "uid is not a user or group id"),
        ("created_at", "yesterday", "created_at is not a time"),
        ("manifest", "[1]", "manifest is not a JSON object"),
        ("mounted", "yes", "mounted is not a boolean"),
        ("task", "t" * 5000, "task is a string, not text"),
    ],
)
def test_each_bad_column_makes_the_row_malformed(column: str, value: object, problem: str) -> None:
    row = store_rows.session_record({**GOOD, column: value}, shared=True)
    assert isinstance(row, store_rows.MalformedRow)
    assert row.table == "sessions" and problem in " ".join(row.problems)
    assert len(row.key) <= store_rows.SHOWN and len(row.digest) == 64


def test_a_bad_credential_row_is_malformed() -> None:
    good: dict[str, object] = {
        "session_id": "s-aaaaaaaaaaaa",
        "name": "kv~2",
        "provider": "vault",
        "type": "token",
        "state": "pending",
    }
    good |= {"reference": "{}", "scope": "{}", "expires_at": None, "fingerprint": None}
    assert isinstance(store_rows.credential_record(good), CredentialRecord)
    for column, value in (("session_id", "../x"), ("name", "../../kv"), ("state", "gone"), ("reference", "{x")):
        assert isinstance(store_rows.credential_record({**good, column: value}), store_rows.MalformedRow), column
    # a reference that is JSON but no provider's reaches the provider, whose refusal leaves the credential pending
    assert isinstance(store_rows.credential_record({**good, "reference": "[1]"}), CredentialRecord)


def test_the_noted_rows_are_bounded_and_the_newest_is_always_kept() -> None:
    noted = store_rows.MalformedRows()
    mark = noted.mark()
    for number in range(store_rows.MAX_NOTED + 50):
        row = store_rows.session_record({**GOOD, "id": f"../{number}"}, shared=True)
        assert isinstance(row, store_rows.MalformedRow)
        noted.note(row)
    kept = noted.since(mark)
    assert len(kept) == store_rows.MAX_NOTED and kept[-1].key == f"../{store_rows.MAX_NOTED + 49}"
