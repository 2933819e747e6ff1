"""The session store in ``state_dir/sessions.db``: SQLite in WAL mode, one transaction per step.

synchronous=FULL makes each step durable before the next begins; the records
and the interface the core uses are in ``broker.core.store.interface``.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from broker.core.store import rows as store_rows
from broker.core.store.interface import (
    CREDENTIAL_STATES,
    SESSION_STATES,
    UNSETTLED_CREDENTIAL_STATES,
    CredentialRecord,
    CredentialState,
    SessionRecord,
    SessionState,
    SessionStore,
)
from broker.core.store.rows import MalformedRows, credential_record, keep, session_record
from broker.core.store.sqlite_approvals import APPROVALS_SCHEMA, SqliteApprovals, insert_session
from broker.vocab.errors import StoreError
from broker.vocab.time import iso, utcnow

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    requester TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    dir TEXT NOT NULL,
    mount_path TEXT NOT NULL,
    uid INTEGER NOT NULL,
    gid INTEGER NOT NULL,
    mounted INTEGER NOT NULL,
    document TEXT,
    exec_bound INTEGER NOT NULL DEFAULT 0,
    manifest TEXT,
    host TEXT NOT NULL DEFAULT '',
    requester_uid INTEGER
);
CREATE INDEX IF NOT EXISTS sessions_state ON sessions(state);
CREATE INDEX IF NOT EXISTS sessions_task ON sessions(task);
CREATE TABLE IF NOT EXISTS credentials (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    name TEXT NOT NULL,
    provider TEXT NOT NULL,
    type TEXT NOT NULL,
    state TEXT NOT NULL,
    reference TEXT NOT NULL DEFAULT '{}',
    scope TEXT NOT NULL DEFAULT '{}',
    expires_at TEXT,
    fingerprint TEXT,
    PRIMARY KEY (session_id, name)
);
CREATE INDEX IF NOT EXISTS credentials_state ON credentials(state);
CREATE INDEX IF NOT EXISTS credentials_expiry ON credentials(provider, expires_at);
-- covers a metrics scrape's pending revocations by provider (COUNT ... GROUP BY provider, no row read)
CREATE INDEX IF NOT EXISTS credentials_state_provider ON credentials(state, provider);
CREATE TABLE IF NOT EXISTS log_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS witness_pending (
    seq INTEGER PRIMARY KEY,
    hash TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS witness_status (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    last_success_at TEXT,
    last_error TEXT
);
CREATE TABLE IF NOT EXISTS checked_prefix (
    log TEXT PRIMARY KEY,
    document TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS malformed_reported (
    digest TEXT PRIMARY KEY,
    reported_at TEXT NOT NULL
);
"""


class SqliteSessionStore(SqliteApprovals, SessionStore):
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.malformed = MalformedRows()
        if os.path.islink(path):
            raise StoreError(f"session store {path} is a symbolic link; remove it")
        try:
            existed = path.exists()
            self._conn = sqlite3.connect(path, timeout=15, check_same_thread=False, isolation_level=None)
            if not existed:
                os.chmod(path, 0o600)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.executescript(_SCHEMA)
            self._migrate()
            self._conn.executescript(APPROVALS_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"session store {path} is unusable: {exc}") from None

    def _migrate(self) -> None:
        """Bring a store written by an older broker up to the current schema, in one write transaction: two
        processes opening a new or older store at once (a launcher's first commands in parallel) each read the
        columns only once the other's changes are in, so neither adds a column twice."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            self._migrate_columns()
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _migrate_columns(self) -> None:
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(sessions)")}
        if "exec_bound" not in columns:
            self._conn.execute("ALTER TABLE sessions ADD COLUMN exec_bound INTEGER NOT NULL DEFAULT 0")
        if "manifest" not in columns:
            self._conn.execute("ALTER TABLE sessions ADD COLUMN manifest TEXT")
        if "host" not in columns:
            self._conn.execute("ALTER TABLE sessions ADD COLUMN host TEXT NOT NULL DEFAULT ''")
        if "requester_uid" not in columns:
            self._conn.execute("ALTER TABLE sessions ADD COLUMN requester_uid INTEGER")
            self._backfill_requester_uids()
        self._migrate_delegation()

    def _backfill_requester_uids(self) -> None:
        """The uid of each session an older broker recorded by name: this store is one host's, so its names are."""
        rows = self._conn.execute("SELECT DISTINCT requester FROM sessions WHERE requester_uid IS NULL").fetchall()
        for (requester,) in rows:
            uid = _requester_uid_of(str(requester))
            if uid is not None:
                self._conn.execute("UPDATE sessions SET requester_uid=? WHERE requester=?", (uid, requester))

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(f"session store {self.path}: {exc}") from None

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                self._conn.row_factory = sqlite3.Row
                return list(self._conn.execute(sql, args).fetchall())
            except sqlite3.Error as exc:
                raise StoreError(f"session store {self.path}: {exc}") from None

    def run_step(self, step: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``step(connection)`` under the store's lock (as PostgreSQL's store does); an error is a StoreError."""
        with self._lock:
            try:
                return step(self._conn)
            except sqlite3.Error as exc:
                raise StoreError(f"session store {self.path}: {exc}") from None

    def _sessions(self, sql: str, args: tuple[Any, ...] = ()) -> list[SessionRecord]:
        rows = [dict(row) for row in self._query(sql, args)]
        return keep(rows, session_record, self.malformed, shared=False)

    def _credentials(self, sql: str, args: tuple[Any, ...] = ()) -> list[CredentialRecord]:
        return keep([dict(row) for row in self._query(sql, args)], credential_record, self.malformed)

    def create_session(self, record: SessionRecord) -> None:
        insert_session(self._tx, record)

    def set_session_state(self, session_id: str, state: SessionState) -> None:
        assert state in SESSION_STATES, state
        with self._tx() as conn:
            conn.execute("UPDATE sessions SET state=? WHERE id=?", (state, session_id))

    def retire_credential(self, session_id: str, name: str, retired_name: str) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE credentials SET name=? WHERE session_id=? AND name=?", (retired_name, session_id, name)
            )

    def mark_exec_bound(self, session_id: str) -> None:
        with self._tx() as conn:
            conn.execute("UPDATE sessions SET exec_bound=1 WHERE id=?", (session_id,))

    def set_session_document(self, session_id: str, document: Mapping[str, Any]) -> None:
        with self._tx() as conn:
            conn.execute("UPDATE sessions SET document=? WHERE id=?", (json.dumps(document), session_id))

    def add_credential(
        self, session_id: str, name: str, provider: str, type_name: str, planned: Mapping[str, str]
    ) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO credentials (session_id, name, provider, type, state, reference) VALUES (?,?,?,?,?,?)",
                (session_id, name, provider, type_name, CredentialState.MINTING, json.dumps(dict(planned))),
            )

    def credential_minted(
        self,
        session_id: str,
        name: str,
        *,
        reference: Mapping[str, str],
        scope: Mapping[str, Any],
        expires_at: datetime,
        fingerprint: str,
    ) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE credentials SET state='active', reference=?, scope=?, expires_at=?, fingerprint=?"
                " WHERE session_id=? AND name=?",
                (
                    json.dumps(dict(reference)),
                    json.dumps(scope),
                    iso(expires_at),
                    fingerprint,
                    session_id,
                    name,
                ),
            )

    def set_credential_state(self, session_id: str, name: str, state: CredentialState) -> None:
        assert state in CREDENTIAL_STATES, state
        with self._tx() as conn:
            conn.execute("UPDATE credentials SET state=? WHERE session_id=? AND name=?", (state, session_id, name))

    def get_session(self, session_id: str) -> SessionRecord | None:
        found = self._sessions("SELECT * FROM sessions WHERE id=?", (session_id,))
        return found[0] if found else None

    def credentials(self, session_id: str) -> list[CredentialRecord]:
        return self._credentials("SELECT * FROM credentials WHERE session_id=? ORDER BY rowid", (session_id,))

    def sessions(
        self,
        *,
        states: tuple[SessionState, ...] | None = None,
        task: str | None = None,
        unknown_states: bool = False,
    ) -> list[SessionRecord]:
        sql = "SELECT * FROM sessions WHERE 1=1"
        args: list[Any] = []
        if states is not None:
            wanted = f"state IN ({','.join('?' * len(states))})"
            unknown, unknown_args = store_rows.unknown_states("?") if unknown_states else ("", [])
            sql += f" AND ({wanted} OR {unknown})" if unknown else f" AND {wanted}"
            args.extend([*states, *unknown_args])
        if task is not None:
            sql += " AND task=?"
            args.append(task)
        return self._sessions(sql + " ORDER BY created_at, id", tuple(args))

    def live_credentials(self, provider: str, now: datetime) -> list[CredentialRecord]:
        sql = "SELECT * FROM credentials WHERE provider=? AND expires_at > ? AND state != 'failed' ORDER BY rowid"
        return self._credentials(sql, (provider, iso(now)))

    def unsettled_credentials(self) -> list[CredentialRecord]:
        marks = ",".join("?" * len(UNSETTLED_CREDENTIAL_STATES))
        sql = f"SELECT * FROM credentials WHERE state IN ({marks})"  # noqa: S608 - placeholders only
        return self._credentials(sql, UNSETTLED_CREDENTIAL_STATES)

    def claim_report(self, digest: str) -> bool:
        with self._tx() as conn:
            cursor = conn.execute(
                "INSERT OR IGNORE INTO malformed_reported (digest, reported_at) VALUES (?, ?)", (digest, iso(utcnow()))
            )
            return cursor.rowcount == 1

    def set_log_head(self, seq: int, record_hash: str) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO log_head (id, seq, hash) VALUES (1, ?, ?)"
                " ON CONFLICT(id) DO UPDATE SET seq=excluded.seq, hash=excluded.hash WHERE excluded.seq > seq",
                (seq, record_hash),
            )

    def log_head(self) -> tuple[int, str] | None:
        rows = self._query("SELECT seq, hash FROM log_head WHERE id=1")
        return (int(rows[0]["seq"]), str(rows[0]["hash"])) if rows else None

    def set_checked_prefix(self, log: str, document: dict[str, Any]) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO checked_prefix (log, document) VALUES (?, ?)"
                " ON CONFLICT(log) DO UPDATE SET document=excluded.document",
                (log, json.dumps(document)),
            )

    def checked_prefix(self, log: str) -> dict[str, Any] | None:
        rows = self._query("SELECT document FROM checked_prefix WHERE log=?", (log,))
        if not rows:
            return None
        document = json.loads(rows[0]["document"])
        return document if isinstance(document, dict) else None

    def add_witness_pending(self, seq: int, record_hash: str, body: str, created_at: str, *, only: bool) -> None:
        with self._tx() as conn:
            if only:
                conn.execute("DELETE FROM witness_pending WHERE seq < ?", (seq,))
            conn.execute(
                "INSERT OR IGNORE INTO witness_pending (seq, hash, body, created_at) VALUES (?, ?, ?, ?)",
                (seq, record_hash, body, created_at),
            )

    def witness_pending(self) -> list[tuple[int, str, str, str]]:
        rows = self._query("SELECT seq, hash, body, created_at FROM witness_pending ORDER BY seq")
        return [(int(r["seq"]), str(r["hash"]), str(r["body"]), str(r["created_at"])) for r in rows]

    def drop_witness_pending(self, seq: int) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM witness_pending WHERE seq=?", (seq,))

    def set_witness_status(self, *, success_at: str | None, error: str | None) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO witness_status (id, last_success_at, last_error) VALUES (1, ?, ?)"
                " ON CONFLICT(id) DO UPDATE SET last_error=excluded.last_error,"
                " last_success_at=COALESCE(excluded.last_success_at, last_success_at)",
                (success_at, error),
            )

    def witness_status(self) -> dict[str, str | None]:
        rows = self._query("SELECT last_success_at, last_error FROM witness_status WHERE id=1")
        if not rows:
            return {"last_success_at": None, "last_error": None}
        return {"last_success_at": rows[0]["last_success_at"], "last_error": rows[0]["last_error"]}

    def close(self) -> None:
        with self._lock:
            self._conn.close()


UID_REQUESTER = re.compile(r"uid:([0-9]{1,10})")
MAX_UID = 2**32 - 2  # (uid_t) -1 is no uid


def _requester_uid_of(requester: str) -> int | None:
    """The uid a requester as recorded (``str(Requester)``) names on this host: ``uid:N``, or a user's name."""
    if match := UID_REQUESTER.fullmatch(requester):
        uid = int(match.group(1))
        return uid if uid <= MAX_UID else None
    try:
        return pwd.getpwnam(requester).pw_uid if requester else None
    except KeyError:
        return None
