"""The session store in PostgreSQL (``store = "postgresql://..."``): one store for brokers on many hosts.

The same interface as the embedded SQLite store (``broker.core.store.interface``),
one transaction per step. Sessions carry the host that holds their
directory; the log head, checked prefixes and witness state are kept per
host, since each host signs its own log. The schema is versioned
(``broker.core.store.postgres.schema``); the locks brokers share are advisory locks
(``broker.core.store.postgres.locks``), taken on the one connection the store's
statements use. A lost connection is a ``StoreError`` (one line, exit 2) and
the next step connects again, unless locks were held on it: then every step
fails until they are released (``AdvisoryLocks.check``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from broker.audit.keys import AuditKeys
from broker.audit.pglog import PostgresIssuanceLog
from broker.core.store.interface import (
    CREDENTIAL_STATES,
    SESSION_STATES,
    UNSETTLED_CREDENTIAL_STATES,
    CredentialRecord,
    SessionRecord,
    SessionStore,
)
from broker.core.store.postgres.approvals import SESSION_COLUMNS, SESSION_NAMES, PostgresApprovals, whole
from broker.core.store.postgres.locks import AdvisoryLock, AdvisoryLocks, PostgresFleetState, first_line
from broker.core.store.postgres.revokes import PostgresFleetRevokes
from broker.core.store.postgres.schema import SCHEMA_VERSION, current_version, migrate
from broker.core.store.rows import MalformedRows, credential_record, keep, session_record
from broker.core.store.rows import unknown_states as unknown_states_sql
from broker.vocab.errors import StoreError
from broker.vocab.holding import Lock

CONNECT_TIMEOUT = 10
_CREDENTIAL_NAMES = (
    "session_id",
    "name",
    "provider",
    "type",
    "state",
    "reference",
    "scope",
    "expires_at",
    "fingerprint",
)
_CREDENTIAL_COLUMNS = ", ".join(_CREDENTIAL_NAMES)


def shown_url(url: str) -> str:
    """The URL without anything after the database name (no options, never a password)."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{user}{parts.hostname}{port}{parts.path}"


class PostgresSessionStore(PostgresApprovals, SessionStore):
    shared = True

    def __init__(self, url: str, *, host: str, passfile: Path | None = None) -> None:
        self.url = url
        self.host = host
        self.where = shown_url(url)
        self._passfile = passfile
        self._lock = threading.Lock()
        self.malformed = MalformedRows()
        self._connection: Any = None
        self._locks = AdvisoryLocks(self.where)
        with self._lock:
            self._call(self._up_to_date)

    def _up_to_date(self, connection: Any) -> None:
        """Migrate only a database behind this broker: the common case costs one read, not a locked transaction."""
        try:
            version = current_version(connection)
        except psycopg.errors.UndefinedTable:  # a new database
            version = 0
        if version != SCHEMA_VERSION:
            migrate(connection, self.where)  # or refuses a newer one

    # -- connection ----------------------------------------------------------------------

    def _connect(self) -> Any:
        options: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT, "autocommit": True}
        options["application_name"] = f"broker@{self.host}"[:63]
        if self._passfile is not None:
            options["passfile"] = str(self._passfile)
        try:
            given = conninfo_to_dict(self.url).get("options") or ""
            options["options"] = f"{given} -c TimeZone=UTC".strip()  # in the startup packet: no extra round trip
            connection = psycopg.connect(self.url, **options)
        except psycopg.Error as exc:
            raise StoreError(f"session store {self.where}: cannot connect: {first_line(exc)}") from None
        return connection

    def _call(self, step: Any) -> Any:
        """Run ``step(connection)`` (the caller holds ``self._lock``); a database error is a StoreError."""
        self._locks.check()
        if self._connection is None or self._connection.closed:
            if self._connection is not None:
                self._reset()  # closed under us: whatever locks it held are gone
                self._locks.check()
            self._connection = self._connect()
        try:
            return step(self._connection)
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError) or self._connection.broken:
                self._reset()
            raise StoreError(f"session store {self.where}: {first_line(exc)}") from None

    def _reset(self) -> None:
        self._locks.connection_lost()
        try:
            self._connection.close()
        finally:
            self._connection = None

    def try_take(self, key: int) -> bool:
        with self._lock:
            return self._locks.take(key, self._call)

    def give_back(self, key: int) -> bool:
        with self._lock:
            return self._locks.drop(key, self._call)

    def _tx(self, *statements: tuple[str, tuple[Any, ...]]) -> None:
        def run(conn: Any) -> None:
            with conn.transaction():
                for sql, args in statements:
                    conn.execute(sql.encode(), args)

        with self._lock:
            self._call(run)

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            return list(self._call(lambda conn: conn.execute(sql.encode(), args).fetchall()))

    def _run(self, sql: str, args: tuple[Any, ...]) -> list[Any]:
        with self._lock:
            return list(self._call(lambda conn: _rows(conn.execute(sql.encode(), args))))

    def _sessions(self, sql: str, args: tuple[Any, ...]) -> list[SessionRecord]:
        rows = [dict(zip(SESSION_NAMES, row, strict=True)) for row in self._query(sql, args)]
        return keep(rows, session_record, self.malformed, shared=True)

    def _credentials(self, sql: str, args: tuple[Any, ...]) -> list[CredentialRecord]:
        rows = [dict(zip(_CREDENTIAL_NAMES, row, strict=True)) for row in self._query(sql, args)]
        return keep(rows, credential_record, self.malformed)

    # -- the fleet -----------------------------------------------------------------------

    def shared_lock(self, name: str) -> Lock:
        return AdvisoryLock(self, name)

    def issuance_log(self, keys: AuditKeys) -> PostgresIssuanceLog:
        return PostgresIssuanceLog(self.run_step, keys, self.host)

    def run_step(self, step: Callable[[Any], Any]) -> Any:
        """Run ``step(connection)`` on the store's connection; a database error is a one-line StoreError."""
        with self._lock:
            return self._call(step)

    def fleet_state(self) -> PostgresFleetState:
        return PostgresFleetState(self, self._run)

    def fleet_revokes(self) -> PostgresFleetRevokes:
        return PostgresFleetRevokes(self.run_step, self._connect, self.host)

    def schema_version(self) -> int:
        with self._lock:
            return int(self._call(current_version))

    def server_time(self) -> datetime:
        rows = self._query("SELECT clock_timestamp()")
        moment: datetime = rows[0][0]
        return moment.astimezone(UTC)

    # -- sessions and credentials --------------------------------------------------------

    def set_session_state(self, session_id: str, state: str) -> None:
        assert state in SESSION_STATES, state
        self._tx(("UPDATE sessions SET state=%s WHERE id=%s", (state, session_id)))

    def retire_credential(self, session_id: str, name: str, retired_name: str) -> None:
        self._tx(("UPDATE credentials SET name=%s WHERE session_id=%s AND name=%s", (retired_name, session_id, name)))

    def mark_exec_bound(self, session_id: str) -> None:
        self._tx(("UPDATE sessions SET exec_bound=TRUE WHERE id=%s", (session_id,)))

    def set_session_document(self, session_id: str, document: Mapping[str, Any]) -> None:
        self._tx(("UPDATE sessions SET document=%s WHERE id=%s", (json.dumps(document), session_id)))

    def add_credential(
        self, session_id: str, name: str, provider: str, type_name: str, planned: Mapping[str, str]
    ) -> None:
        self._tx(
            (
                "INSERT INTO credentials (session_id, name, provider, type, state, reference)"
                " VALUES (%s,%s,%s,%s,'minting',%s)",
                (session_id, name, provider, type_name, json.dumps(dict(planned))),
            )
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
        self._tx(
            (
                "UPDATE credentials SET state='active', reference=%s, scope=%s, expires_at=%s, fingerprint=%s"
                " WHERE session_id=%s AND name=%s",
                (json.dumps(dict(reference)), json.dumps(scope), whole(expires_at), fingerprint, session_id, name),
            )
        )

    def set_credential_state(self, session_id: str, name: str, state: str) -> None:
        assert state in CREDENTIAL_STATES, state
        self._tx(("UPDATE credentials SET state=%s WHERE session_id=%s AND name=%s", (state, session_id, name)))

    def get_session(self, session_id: str) -> SessionRecord | None:
        found = self._sessions(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id=%s", (session_id,))  # noqa: S608
        return found[0] if found else None

    def credentials(self, session_id: str) -> list[CredentialRecord]:
        sql = f"SELECT {_CREDENTIAL_COLUMNS} FROM credentials WHERE session_id=%s ORDER BY ord"  # noqa: S608
        return self._credentials(sql, (session_id,))

    def sessions(
        self, *, states: tuple[str, ...] | None = None, task: str | None = None, unknown_states: bool = False
    ) -> list[SessionRecord]:
        sql = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE TRUE"  # noqa: S608 - constant columns
        args: list[Any] = []
        if states is not None:
            unknown, unknown_args = unknown_states_sql("%s") if unknown_states else ("", [])
            sql += f" AND (state = ANY(%s) OR {unknown})" if unknown else " AND state = ANY(%s)"
            args += [list(states), *unknown_args]
        if task is not None:
            sql += " AND task=%s"
            args.append(task)
        return self._sessions(sql + " ORDER BY created_at, id", tuple(args))

    def live_credentials(self, provider: str, now: datetime) -> list[CredentialRecord]:
        sql = (
            f"SELECT {_CREDENTIAL_COLUMNS} FROM credentials"  # noqa: S608 - constant columns
            " WHERE provider=%s AND expires_at > %s AND state != 'failed' ORDER BY ord"
        )
        return self._credentials(sql, (provider, whole(now)))

    def unsettled_credentials(self) -> list[CredentialRecord]:
        sql = f"SELECT {_CREDENTIAL_COLUMNS} FROM credentials WHERE state = ANY(%s) ORDER BY ord"  # noqa: S608
        return self._credentials(sql, (list(UNSETTLED_CREDENTIAL_STATES),))

    def claim_report(self, digest: str) -> bool:
        sql = "INSERT INTO malformed_reported (digest, host) VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING digest"
        return bool(self._run(sql, (digest, self.host)))

    # -- this host's log and witness -----------------------------------------------------

    def set_log_head(self, seq: int, record_hash: str) -> None:
        self._tx(
            (
                "INSERT INTO log_head (host, seq, hash) VALUES (%s, %s, %s) ON CONFLICT (host) DO UPDATE"
                " SET seq=EXCLUDED.seq, hash=EXCLUDED.hash WHERE EXCLUDED.seq > log_head.seq",
                (self.host, seq, record_hash),
            )
        )

    def log_head(self) -> tuple[int, str] | None:
        rows = self._query("SELECT seq, hash FROM log_head WHERE host=%s", (self.host,))
        return (int(rows[0][0]), str(rows[0][1])) if rows else None

    def set_checked_prefix(self, log: str, document: dict[str, Any]) -> None:
        self._tx(
            (
                "INSERT INTO checked_prefix (host, log, document) VALUES (%s, %s, %s)"
                " ON CONFLICT (host, log) DO UPDATE SET document=EXCLUDED.document",
                (self.host, log, json.dumps(document)),
            )
        )

    def checked_prefix(self, log: str) -> dict[str, Any] | None:
        rows = self._query("SELECT document FROM checked_prefix WHERE host=%s AND log=%s", (self.host, log))
        if not rows:
            return None
        document = json.loads(rows[0][0])
        return document if isinstance(document, dict) else None

    def add_witness_pending(self, seq: int, record_hash: str, body: str, created_at: str, *, only: bool) -> None:
        insert = (
            "INSERT INTO witness_pending (host, seq, hash, body, created_at) VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT DO NOTHING",
            (self.host, seq, record_hash, body, created_at),
        )
        if only:
            self._tx(("DELETE FROM witness_pending WHERE host=%s AND seq < %s", (self.host, seq)), insert)
        else:
            self._tx(insert)

    def witness_pending(self) -> list[tuple[int, str, str, str]]:
        rows = self._query(
            "SELECT seq, hash, body, created_at FROM witness_pending WHERE host=%s ORDER BY seq", (self.host,)
        )
        return [(int(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    def drop_witness_pending(self, seq: int) -> None:
        self._tx(("DELETE FROM witness_pending WHERE host=%s AND seq=%s", (self.host, seq)))

    def set_witness_status(self, *, success_at: str | None, error: str | None) -> None:
        self._tx(
            (
                "INSERT INTO witness_status (host, last_success_at, last_error) VALUES (%s, %s, %s)"
                " ON CONFLICT (host) DO UPDATE SET last_error=EXCLUDED.last_error,"
                " last_success_at=COALESCE(EXCLUDED.last_success_at, witness_status.last_success_at)",
                (self.host, success_at, error),
            )
        )

    def witness_status(self) -> dict[str, str | None]:
        rows = self._query("SELECT last_success_at, last_error FROM witness_status WHERE host=%s", (self.host,))
        if not rows:
            return {"last_success_at": None, "last_error": None}
        return {"last_success_at": rows[0][0], "last_error": rows[0][1]}

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._reset()


def _rows(cursor: Any) -> list[Any]:
    return list(cursor.fetchall()) if cursor.description else []
