"""Sessions as rows, approval requests, and delegated sessions in the PostgreSQL store.

A mixin of ``PostgresSessionStore`` (``broker.core.store.postgres.store``),
on its one connection. The session row's columns are listed here once: a
session is inserted alone (``create_session``) or with its approval request
(``create_approval``), in one transaction either way. Each decision is a
compare-and-set in one transaction, so two approvers (on two hosts), an
approver and a sweep's expiry, or two collectors never both win.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from broker.core.store.interface import ApprovalRecord, SessionRecord
from broker.core.store.rows import MalformedRows, approval_record, keep
from broker.core.store.states import ApprovalState, SessionState

SESSION_NAMES = [
    "id",
    "host",
    "task",
    "requester",
    "state",
    "created_at",
    "expires_at",
    "dir",
    "mount_path",
    "uid",
    "gid",
    "mounted",
    "document",
    "exec_bound",
    "manifest",
    "requester_uid",
    "parent",
    "delegate_depth",
]
SESSION_COLUMNS = ", ".join(SESSION_NAMES)
_SESSION_VALUES = ",".join(["%s"] * len(SESSION_NAMES))
_APPROVAL_NAMES = (
    "id",
    "task",
    "requester",
    "requester_uid",
    "state",
    "digest",
    "summary",
    "approvers",
    "timeout",
    "created_at",
    "expires_at",
    "host",
    "decided_at",
    "decided_by",
    "decided_by_uid",
    "reason",
)
_APPROVAL_COLUMNS = ", ".join(_APPROVAL_NAMES)
Statement = tuple[str, tuple[Any, ...]]


def whole(moment: datetime) -> datetime:
    """Whole seconds in UTC, as the SQLite store keeps them."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).replace(microsecond=0)


class PostgresApprovals:
    """The ``Approvals`` part of the PostgreSQL store, and its session inserts."""

    host: str
    malformed: MalformedRows
    _tx: Callable[..., None]
    _query: Callable[..., list[Any]]
    _run: Callable[..., list[Any]]
    _sessions: Callable[..., list[SessionRecord]]
    run_step: Callable[[Callable[[Any], Any]], Any]

    def _insert_session(self, record: SessionRecord) -> Statement:
        values = (
            record.id,
            record.host or self.host,
            record.task,
            record.requester,
            record.state,
            whole(record.created_at),
            whole(record.expires_at),
            record.dir,
            record.mount_path,
            record.uid,
            record.gid,
            record.mounted,
            None if record.document is None else json.dumps(record.document),
            record.exec_bound,
            None if record.manifest is None else json.dumps(record.manifest),
            record.requester_uid,
            record.parent,
            record.delegate_depth,
        )
        return f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ({_SESSION_VALUES})", values  # noqa: S608

    def create_session(self, record: SessionRecord) -> None:
        self._tx(self._insert_session(record))

    def create_approval(self, session: SessionRecord, approval: ApprovalRecord) -> None:
        insert = (
            "INSERT INTO approvals (id, task, requester, requester_uid, state, digest, summary, approvers, timeout,"
            " created_at, expires_at, host) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
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
                whole(approval.created_at),
                whole(approval.expires_at),
                approval.host or self.host,
            ),
        )
        self._tx(self._insert_session(session), insert)

    def get_approval(self, request: str) -> ApprovalRecord | None:
        found = self._approvals(f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE id=%s", (request,))  # noqa: S608
        return found[0] if found else None

    def approvals(self, states: tuple[ApprovalState, ...]) -> list[ApprovalRecord]:
        sql = f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE state = ANY(%s) ORDER BY created_at, id"  # noqa: S608
        return self._approvals(sql, ([str(state) for state in states],))

    def _approvals(self, sql: str, args: tuple[Any, ...]) -> list[ApprovalRecord]:
        rows = [dict(zip(_APPROVAL_NAMES, row, strict=True)) for row in self._query(sql, args)]
        return keep(rows, approval_record, self.malformed, shared=True)

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
        def step(connection: Any) -> bool:
            with connection.transaction():
                cursor = connection.execute(
                    b"UPDATE approvals SET state=%s, decided_at=COALESCE(%s, decided_at),"
                    b" decided_by=COALESCE(%s, decided_by), decided_by_uid=COALESCE(%s, decided_by_uid),"
                    b" reason=COALESCE(%s, reason), expires_at=COALESCE(%s, expires_at)"
                    b" WHERE id=%s AND state = ANY(%s)",
                    (
                        str(now),
                        whole(at) if by is not None else None,
                        by,
                        by_uid,
                        reason,
                        whole(expires_at) if expires_at is not None else None,
                        request,
                        [str(state) for state in was],
                    ),
                )
                if cursor.rowcount != 1:
                    return False
                if session_state is not None:
                    connection.execute(
                        b"UPDATE sessions SET state=%s WHERE id=%s AND state=%s",
                        (str(session_state), request, str(SessionState.AWAITING_APPROVAL)),
                    )
                return True

        return bool(self.run_step(step))

    def collect_approval(self, session: SessionRecord) -> bool:
        def step(connection: Any) -> bool:
            with connection.transaction():
                cursor = connection.execute(
                    b"UPDATE approvals SET state=%s WHERE id=%s AND state=%s",
                    (str(ApprovalState.COLLECTED), session.id, str(ApprovalState.GRANTED)),
                )
                if cursor.rowcount != 1:
                    return False
                connection.execute(
                    b"UPDATE sessions SET state=%s, created_at=%s, expires_at=%s, dir=%s, mount_path=%s, mounted=%s,"
                    b" delegate_depth=%s WHERE id=%s AND state=%s",
                    (
                        str(session.state),
                        whole(session.created_at),
                        whole(session.expires_at),
                        session.dir,
                        session.mount_path,
                        session.mounted,
                        session.delegate_depth,
                        session.id,
                        str(SessionState.AWAITING_APPROVAL),
                    ),
                )
                return True

        return bool(self.run_step(step))

    def children(self, parent: str) -> list[SessionRecord]:
        sql = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE parent=%s ORDER BY created_at, id"  # noqa: S608
        return self._sessions(sql, (parent,))
