"""Approval requests in both stores: made with their session in one transaction, decided once, durable.

The same checks against SQLite and a real PostgreSQL: every decision is a
compare-and-set (two approvers, or an approver and the expiry, never both
win; one collector wins), a request survives the store being closed and
opened again, an older store gains the new columns and table, and a
malformed row is skipped like any other.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from broker.core.store import open_store
from broker.core.store.interface import ApprovalRecord, SessionRecord, SessionStore
from broker.core.store.postgres.schema import MIGRATIONS, SCHEMA_VERSION
from broker.core.store.postgres.store import PostgresSessionStore
from broker.core.store.states import ApprovalState, SessionState
from tests.fixtures.fleet import create_fleet_db
from tests.fixtures.postgres import Postgres

NOW = datetime.now(UTC).replace(microsecond=0)


def _session(session: str, state: SessionState = SessionState.AWAITING_APPROVAL, **extra: Any) -> SessionRecord:
    return SessionRecord(
        id=session,
        task="deploy-1",
        requester="uid:1000",
        state=state,
        created_at=NOW,
        expires_at=NOW + timedelta(minutes=15),
        dir=f"/run/broker/{session}",
        mount_path="/run/secrets",
        uid=1000,
        gid=1000,
        mounted=False,
        document=None,
        manifest={"json": False, "text": "version: 1"},
        host="host-a",
        requester_uid=1000,
        **extra,
    )


def _approval(request: str) -> ApprovalRecord:
    return ApprovalRecord(
        request=request,
        task="deploy-1",
        requester="uid:1000",
        requester_uid=1000,
        state=ApprovalState.PENDING,
        digest="a" * 64,
        summary={"manifest": {"document": {"task": "deploy-1"}}, "decision": {"allowed": True}},
        approvers=(("group:release", "uid:1001"),),
        timeout=900,
        created_at=NOW,
        expires_at=NOW + timedelta(minutes=15),
        host="host-a",
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def opened(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A function opening the same store again each time it is called (SQLite, or a fleet's PostgreSQL)."""
    if request.param == "sqlite":
        yield lambda: open_store(tmp_path)
        return
    postgres: Postgres = request.getfixturevalue("postgres")
    db = create_fleet_db(postgres, tmp_path)
    yield lambda: PostgresSessionStore(db.url, host="host-a", passfile=db.passfile)


def _decide(store: SessionStore, request: str, now: ApprovalState, **extra: Any) -> bool:
    return store.decide_approval(request, was=(ApprovalState.PENDING,), now=now, at=NOW, **extra)


def test_a_request_is_kept_with_its_session_and_survives_the_store_being_opened_again(opened: Any) -> None:
    store = opened()
    store.create_approval(_session("s-approval00001"), _approval("s-approval00001"))
    store.close()
    store = opened()
    try:
        found = store.get_approval("s-approval00001")
        assert found is not None and found.state == ApprovalState.PENDING
        assert found.approvers == (("group:release", "uid:1001"),)
        assert found.summary == _approval("s-approval00001").summary and found.expires_at == NOW + timedelta(minutes=15)
        session = store.get_session("s-approval00001")
        assert session is not None and session.state == SessionState.AWAITING_APPROVAL
        assert [a.request for a in store.approvals((ApprovalState.PENDING,))] == ["s-approval00001"]
    finally:
        store.close()


def test_two_deciders_racing_never_both_win(opened: Any) -> None:
    store = opened()
    try:
        store.create_approval(_session("s-approval00002"), _approval("s-approval00002"))
        outcomes: list[bool] = []
        others = [opened() for _ in range(6)]
        barrier = threading.Barrier(len(others))

        def decide(other: SessionStore, index: int) -> None:
            barrier.wait()
            state = ApprovalState.GRANTED if index % 2 else ApprovalState.DENIED
            session_state = None if index % 2 else SessionState.DENIED
            outcomes.append(_decide(other, "s-approval00002", state, by=f"uid:{index}", session_state=session_state))

        threads = [threading.Thread(target=decide, args=(other, i)) for i, other in enumerate(others)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for other in others:
            other.close()
        assert sorted(outcomes) == [False] * 5 + [True]
        found = store.get_approval("s-approval00002")
        assert found is not None and found.decided_by is not None
        session = store.get_session("s-approval00002")
        assert session is not None
        expected = SessionState.DENIED if found.state == ApprovalState.DENIED else SessionState.AWAITING_APPROVAL
        assert session.state == expected
    finally:
        store.close()


def test_an_approved_request_is_collected_once(opened: Any) -> None:
    store = opened()
    try:
        store.create_approval(_session("s-approval00003"), _approval("s-approval00003"))
        issuing = _session("s-approval00003", SessionState.ISSUING)
        assert not store.collect_approval(issuing)  # not approved yet
        assert _decide(store, "s-approval00003", ApprovalState.GRANTED, by="uid:1001", by_uid=1001)
        assert store.collect_approval(issuing)
        assert not store.collect_approval(issuing)
        found = store.get_approval("s-approval00003")
        assert found is not None and (found.state, found.decided_by_uid) == (ApprovalState.COLLECTED, 1001)
        session = store.get_session("s-approval00003")
        assert session is not None and session.state == SessionState.ISSUING
    finally:
        store.close()


def test_children_are_found_by_their_parent(opened: Any) -> None:
    store = opened()
    try:
        store.create_session(_session("s-parent000001", SessionState.ACTIVE, delegate_depth=2))
        store.create_session(_session("s-child0000001", SessionState.ACTIVE, parent="s-parent000001"))
        store.create_session(_session("s-child0000002", SessionState.REVOKED, parent="s-parent000001"))
        assert [c.id for c in store.children("s-parent000001")] == ["s-child0000001", "s-child0000002"]
        parent = store.get_session("s-parent000001")
        assert parent is not None and parent.delegate_depth == 2 and parent.parent is None
    finally:
        store.close()


def test_an_older_sqlite_store_gains_the_approvals_table_and_the_delegation_columns(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create_session(_session("s-older0000001", SessionState.ACTIVE))
    store.close()
    with sqlite3.connect(tmp_path / "sessions.db") as conn:  # as a broker before approvals left it
        conn.execute("DROP TABLE approvals")
        conn.execute("DROP INDEX sessions_parent")
        conn.execute("ALTER TABLE sessions DROP COLUMN parent")
        conn.execute("ALTER TABLE sessions DROP COLUMN delegate_depth")
    store = open_store(tmp_path)
    try:
        old = store.get_session("s-older0000001")
        assert old is not None and (old.parent, old.delegate_depth) == (None, 0)
        store.create_approval(_session("s-approval00004"), _approval("s-approval00004"))
        assert store.get_approval("s-approval00004") is not None
    finally:
        store.close()


@pytest.mark.server
def test_a_fleet_database_of_version_4_is_migrated_keeping_its_sessions(postgres: Postgres, tmp_path: Path) -> None:
    db = create_fleet_db(postgres, tmp_path)
    with psycopg.connect(postgres.dsn(dbname=db.name), autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ DEFAULT now())")
        for version, migration in enumerate(MIGRATIONS[:4], start=1):
            conn.execute(migration.encode())
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
        conn.execute(
            "INSERT INTO sessions (id, host, task, requester, state, created_at, expires_at, dir, mount_path,"
            " uid, gid, mounted) VALUES ('s-v4session001', 'host-a', 'fix-1', 'uid:1', 'active', now(), now(),"
            " '/x', '/y', 1, 1, false)"
        )
    store = PostgresSessionStore(db.url, host="host-a", passfile=db.passfile)
    try:
        assert store.schema_version() == SCHEMA_VERSION == len(MIGRATIONS)
        kept = store.get_session("s-v4session001")
        assert kept is not None and (kept.parent, kept.delegate_depth) == (None, 0)
        store.create_approval(_session("s-approval00005"), _approval("s-approval00005"))
        assert store.get_approval("s-approval00005") is not None
    finally:
        store.close()


@pytest.mark.server
def test_a_fleet_database_of_version_5_keeps_its_requests_and_gains_the_fleet_revokes(
    postgres: Postgres, tmp_path: Path
) -> None:
    """Migration 5 is the approvals'; 6, the fleet revoke's ``revoke_requests``, comes after it."""
    assert SCHEMA_VERSION == 6 and "CREATE TABLE approvals" in MIGRATIONS[4] and "revoke_requests" in MIGRATIONS[5]
    db = create_fleet_db(postgres, tmp_path)
    store = PostgresSessionStore(db.url, host="host-a", passfile=db.passfile)
    try:
        store.create_approval(_session("s-approval00010"), _approval("s-approval00010"))
    finally:
        store.close()
    with psycopg.connect(postgres.dsn(dbname=db.name), autocommit=True) as conn:  # as a broker of version 5 left it
        conn.execute("DROP TABLE revoke_requests")
        conn.execute("DELETE FROM schema_version WHERE version = 6")
    store = PostgresSessionStore(db.url, host="host-b", passfile=db.passfile)
    try:
        assert store.schema_version() == 6
        kept = store.get_approval("s-approval00010")
        assert kept is not None and kept.state == ApprovalState.PENDING
        revokes = store.fleet_revokes()
        assert revokes is not None
        assert revokes.ask("s-approval00010", "host-a") is False  # recorded; host-a's daemon is not listening
    finally:
        store.close()
    holder = PostgresSessionStore(db.url, host="host-a", passfile=db.passfile)
    try:
        revokes = holder.fleet_revokes()
        assert revokes is not None and revokes.waiting() == ["s-approval00010"]
    finally:
        holder.close()


def test_a_malformed_approval_row_is_skipped_and_noted(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        store.create_approval(_session("s-approval00006"), _approval("s-approval00006"))
        store.create_approval(_session("s-approval00007"), _approval("s-approval00007"))
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "sessions.db") as conn:
        conn.execute("UPDATE approvals SET approvers='not json' WHERE id='s-approval00006'")
    store = open_store(tmp_path)
    try:
        mark = store.malformed.mark()
        assert [a.request for a in store.approvals((ApprovalState.PENDING,))] == ["s-approval00007"]
        [row] = store.malformed.since(mark)
        assert (row.table, row.key) == ("approvals", "s-approval00006")
    finally:
        store.close()


def test_the_metrics_count_the_requests_waiting_for_a_decision(opened: Any) -> None:
    from broker.core.store.gauges import StoreGaugeReader

    store = opened()
    try:
        store.create_approval(_session("s-approval00008"), _approval("s-approval00008"))
        store.create_approval(_session("s-approval00009"), _approval("s-approval00009"))
        _decide(store, "s-approval00009", ApprovalState.DENIED, by="uid:1001", session_state=SessionState.DENIED)
        assert StoreGaugeReader(store).gauge_counts().approvals_pending == 1
    finally:
        store.close()
