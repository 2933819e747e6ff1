"""Sessions remember their requester's uid; a store written by an older broker gets it where it is provable.

SQLite is one host's store, so a requester recorded by name is that host's
user and its uid is looked up; PostgreSQL is the fleet's, where a name means
nothing across hosts: only ``uid:N`` rows get their uid, the others stay
without one (through a daemon only root acts on them).
"""

from __future__ import annotations

import dataclasses
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from broker.core.store import open_store
from broker.core.store.interface import SessionRecord
from broker.core.store.postgres.schema import MIGRATIONS, SCHEMA_VERSION
from broker.core.store.postgres.store import PostgresSessionStore
from broker.core.store.states import SessionState
from tests.fixtures.fleet import create_fleet_db
from tests.fixtures.postgres import Postgres

REQUESTERS = {"s-olduid000001": "uid:59123", "s-oldroot00001": "root", "s-oldname00001": "no-such-user-here"}
BACKFILLED = {"s-olduid000001": 59123, "s-oldroot00001": 0}


def _record(session: str, requester: str) -> SessionRecord:
    now = datetime.now(UTC)
    return SessionRecord(
        id=session,
        task="fix-1",
        requester=requester,
        state=SessionState.ACTIVE,
        created_at=now,
        expires_at=now + timedelta(minutes=5),
        dir=f"/run/broker/{session}",
        mount_path="/run/secrets",
        uid=1000,
        gid=1000,
        mounted=False,
        document=None,
    )


def test_a_new_session_records_its_requesters_uid(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        store.create_session(dataclasses.replace(_record("s-newuid000001", "uid:59123"), requester_uid=59123))
        record = store.get_session("s-newuid000001")
        assert record is not None and record.requester_uid == 59123
    finally:
        store.close()


def test_an_older_sqlite_store_gets_the_uid_of_each_requester_of_this_host(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for session, requester in REQUESTERS.items():
        store.create_session(_record(session, requester))
    store.close()
    with sqlite3.connect(tmp_path / "sessions.db") as conn:
        conn.execute("ALTER TABLE sessions DROP COLUMN requester_uid")  # as an older broker left it
    store = open_store(tmp_path)
    try:
        found = {session: store.get_session(session) for session in REQUESTERS}
        assert {s: r.requester_uid for s, r in found.items() if r is not None} == {**BACKFILLED, "s-oldname00001": None}
    finally:
        store.close()


@pytest.mark.server
def test_the_fleet_migration_keeps_uids_the_rows_named_and_no_user_names(postgres: Postgres, tmp_path: Path) -> None:
    db = create_fleet_db(postgres, tmp_path)
    with psycopg.connect(postgres.dsn(dbname=db.name), autocommit=True) as conn:  # as a broker of version 2 left it
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ DEFAULT now())")
        for version, migration in enumerate(MIGRATIONS[:2], start=1):
            conn.execute(migration.encode())
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
        for session, requester in REQUESTERS.items():
            conn.execute(
                "INSERT INTO sessions (id, host, task, requester, state, created_at, expires_at, dir, mount_path,"
                " uid, gid, mounted) VALUES (%s, 'host-b', 'fix-1', %s, 'active', now(), now(), '/x', '/y', 1, 1, false)",
                (session, requester),
            )
    store = PostgresSessionStore(db.url, host="host-a", passfile=db.passfile)
    try:
        found = {session: store.get_session(session) for session in REQUESTERS}
        assert {s: r.requester_uid for s, r in found.items() if r is not None} == {
            "s-olduid000001": 59123,
            "s-oldroot00001": None,  # "root" is a name: on another host it may be anyone's
            "s-oldname00001": None,
        }
    finally:
        store.close()
    assert SCHEMA_VERSION >= 4  # version 4 added the column; later ones keep it
