"""Approval requests and delegated sessions in the SQLite store: the table, and the steps that change them.

A mixin of ``SqliteSessionStore`` (``broker.core.store.sqlite``), sharing its
connection, its lock and its one-transaction-per-step helpers. Each decision
is a compare-and-set inside one ``BEGIN IMMEDIATE`` transaction, so two
approvers, an approver and the sweep's expiry, or two collectors never both
win.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from broker.core.store.interface import ApprovalRecord, SessionRecord
from broker.core.store.rows import MalformedRows, approval_record, keep
from broker.core.store.states import ApprovalState, SessionState
from broker.vocab.time import iso

APPROVALS_SCHEMA = """
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY REFERENCES sessions(id),
    task TEXT NOT NULL,
    requester TEXT NOT NULL,
    requester_uid INTEGER,
    state TEXT NOT NULL,
    digest TEXT NOT NULL,
    summary TEXT NOT NULL,
    approvers TEXT NOT NULL,
    timeout INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    host TEXT NOT NULL DEFAULT '',
    decided_at TEXT,
    decided_by TEXT,
    decided_by_uid INTEGER,
    reason TEXT
);
CREATE INDEX IF NOT EXISTS approvals_state ON approvals(state);
"""
_DECIDE = (
    "UPDATE approvals SET state=?, decided_at=COALESCE(?, decided_at), decided_by=COALESCE(?, decided_by),"
    " decided_by_uid=COALESCE(?, decided_by_uid), reason=COALESCE(?, reason),"
    " expires_at=COALESCE(?, expires_at) WHERE id=? AND state IN ("
)
#: Columns an older store's ``sessions`` lacks, added when it is opened.
DELEGATION_COLUMNS = {"parent": "TEXT", "delegate_depth": "INTEGER NOT NULL DEFAULT 0"}


class SqliteApprovals:
    """The ``Approvals`` part of the SQLite store."""

    malformed: MalformedRows
    _tx: Callable[[], AbstractContextManager[sqlite3.Connection]]
    _query: Callable[..., list[sqlite3.Row]]
    _sessions: Callable[..., list[SessionRecord]]
    _conn: sqlite3.Connection

    def _migrate_delegation(self) -> None:
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(sessions)")}
        for column, kind in DELEGATION_COLUMNS.items():
            if column not in columns:
                self._conn.execute(f"ALTER TABLE sessions ADD COLUMN {column} {kind}")
        self._conn.execute("CREATE INDEX IF NOT EXISTS sessions_parent ON sessions(parent)")

    def create_approval(self, session: SessionRecord, approval: ApprovalRecord) -> None:
        with self._tx() as conn:
            _insert_session(conn, session)
            conn.execute(
                "INSERT INTO approvals (id, task, requester, requester_uid, state, digest, summary, approvers,"
                " timeout, created_at, expires_at, host) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    approval.request,
                    approval.task,
                    approval.requester,
                    approval.requester_uid,
                    approval.state,
                    approval.digest,
                    json.dumps(approval.summary, sort_keys=True),
                    json.dumps([list(group) for group in approval.approvers]),
                    approval.timeout,
                    iso(approval.created_at),
                    iso(approval.expires_at),
                    approval.host,
                ),
            )

    def get_approval(self, request: str) -> ApprovalRecord | None:
        found = self._approvals("SELECT * FROM approvals WHERE id=?", (request,))
        return found[0] if found else None

    def approvals(self, states: tuple[ApprovalState, ...]) -> list[ApprovalRecord]:
        marks = ",".join("?" * len(states))
        sql = f"SELECT * FROM approvals WHERE state IN ({marks}) ORDER BY created_at, id"  # noqa: S608
        return self._approvals(sql, tuple(states))

    def _approvals(self, sql: str, args: tuple[Any, ...]) -> list[ApprovalRecord]:
        return keep([dict(row) for row in self._query(sql, args)], approval_record, self.malformed, shared=False)

    def decide_approval(
        self,
        request: str,
        *,
        was: tuple[ApprovalState, ...],
        now: ApprovalState,
        at: datetime,
        expires_at: datetime | None = None,
        by: str | None = None,
        by_uid: int | None = None,
        reason: str | None = None,
        session_state: SessionState | None = None,
    ) -> bool:
        sql = _DECIDE + ",".join("?" * len(was)) + ")"  # placeholders only
        with self._tx() as conn:
            cursor = conn.execute(
                sql,
                (
                    now,
                    iso(at) if by is not None else None,
                    by,
                    by_uid,
                    reason,
                    iso(expires_at) if expires_at is not None else None,
                    request,
                    *was,
                ),
            )
            if cursor.rowcount != 1:
                return False
            if session_state is not None:
                conn.execute(
                    "UPDATE sessions SET state=? WHERE id=? AND state=?",
                    (session_state, request, SessionState.AWAITING_APPROVAL),
                )
            return True

    def collect_approval(self, session: SessionRecord) -> bool:
        with self._tx() as conn:
            cursor = conn.execute(
                "UPDATE approvals SET state=? WHERE id=? AND state=?",
                (ApprovalState.COLLECTED, session.id, ApprovalState.GRANTED),
            )
            if cursor.rowcount != 1:
                return False
            conn.execute(
                "UPDATE sessions SET state=?, created_at=?, expires_at=?, dir=?, mount_path=?, mounted=?,"
                " delegate_depth=? WHERE id=? AND state=?",
                (
                    session.state,
                    iso(session.created_at),
                    iso(session.expires_at),
                    session.dir,
                    session.mount_path,
                    int(session.mounted),
                    session.delegate_depth,
                    session.id,
                    SessionState.AWAITING_APPROVAL,
                ),
            )
            return True

    def children(self, parent: str) -> list[SessionRecord]:
        return self._sessions("SELECT * FROM sessions WHERE parent=? ORDER BY created_at, id", (parent,))


def _insert_session(conn: sqlite3.Connection, record: SessionRecord) -> None:
    conn.execute(
        "INSERT INTO sessions (id, task, requester, state, created_at, expires_at, dir, mount_path,"
        " uid, gid, mounted, document, exec_bound, manifest, host, requester_uid, parent, delegate_depth)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            record.id,
            record.task,
            record.requester,
            record.state,
            iso(record.created_at),
            iso(record.expires_at),
            record.dir,
            record.mount_path,
            record.uid,
            record.gid,
            int(record.mounted),
            None if record.document is None else json.dumps(record.document),
            int(record.exec_bound),
            None if record.manifest is None else json.dumps(record.manifest),
            record.host,
            record.requester_uid,
            record.parent,
            record.delegate_depth,
        ),
    )


Transaction = Callable[[], AbstractContextManager[sqlite3.Connection]]


def insert_session(transaction: Transaction, record: SessionRecord) -> None:
    """``create_session``: one session row in its own transaction."""
    with transaction() as conn:
        _insert_session(conn, record)
