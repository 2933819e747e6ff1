"""A revoke of a session another host holds, in PostgreSQL: the ask in ``revoke_requests``, the wake-up by NOTIFY.

A GitHub token can be revoked only with itself, which the holding host's
keep-safe has; the session's tmpfs and a running exec are that host's too.
So the revoking host records an ask (``revoke_requests``: the session, the
holder, who asked, when) and, in the same transaction, ``NOTIFY
broker_revoke`` with the session id as the only payload: one channel for the
fleet (a database's notifications reach only its own listeners). The
holder's daemon keeps a connection of its own listening on it
(``PostgresRevokeListener``), revokes what only it can, and marks the ask
done (``finished``, with whether it wiped the directory), which the asking
host reads back (``answered``). A notification is lost while nobody listens,
so the ask stays in the table until the holder finishes it, at its next
start or sweep (``waiting``).

While its listening connection is open the daemon holds an advisory lock
named after its host; ``ask`` reports whether that lock is held (read in
``pg_locks``, taking nothing), so a revoke does not wait for a host whose
daemon is down, or that runs none.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from broker.core.store.interface import FleetRevokes, RevokeListener
from broker.core.store.postgres.locks import first_line, lock_key
from broker.vocab.errors import StoreError
from broker.vocab.session_ids import is_session_id

CHANNEL = "broker_revoke"
LISTENER = "fleet-listener:"  # + host: the advisory lock a listening daemon holds


def _lock_parts(host: str) -> tuple[int, int]:
    """The listener lock's key as ``pg_locks`` shows a 64-bit advisory key: (classid, objid), high and low halves."""
    unsigned = lock_key(LISTENER + host) & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


_ASK = (
    "INSERT INTO revoke_requests (session_id, host, asked_by) VALUES (%s, %s, %s)"
    " ON CONFLICT (session_id) DO UPDATE SET host = EXCLUDED.host, asked_by = EXCLUDED.asked_by,"
    " asked_at = now(), done_at = NULL, dir_removed = FALSE"
)
_LISTENING = (
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND classid::int8 = %s AND objid::int8 = %s)"
)


class PostgresFleetRevokes(FleetRevokes):
    def __init__(self, run_step: Callable[[Callable[[Any], Any]], Any], connect: Callable[[], Any], host: str) -> None:
        self._run = run_step
        self._connect = connect
        self.host = host

    def ask(self, session_id: str, holder: str) -> bool:
        def step(conn: Any) -> bool:
            with conn.transaction():
                conn.execute(_ASK, (session_id, holder, self.host))
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, session_id))  # sent when this commits
            row = conn.execute(_LISTENING, _lock_parts(holder)).fetchone()
            return bool(row and row[0])

        return bool(self._run(step))

    def answered(self, session_ids: Collection[str]) -> dict[str, bool]:
        sql = "SELECT session_id, dir_removed FROM revoke_requests WHERE session_id = ANY(%s) AND done_at IS NOT NULL"
        rows = self._run(lambda conn: conn.execute(sql, (list(session_ids),)).fetchall())
        return {str(row[0]): bool(row[1]) for row in rows}

    def waiting(self) -> list[str]:
        sql = "SELECT session_id FROM revoke_requests WHERE host = %s AND done_at IS NULL ORDER BY asked_at"
        rows = self._run(lambda conn: conn.execute(sql, (self.host,)).fetchall())
        return [str(row[0]) for row in rows if is_session_id(str(row[0]))]  # read back like input

    def finished(self, session_id: str, *, dir_removed: bool) -> None:
        sql = "UPDATE revoke_requests SET done_at = now(), dir_removed = %s WHERE session_id = %s AND host = %s"
        self._run(lambda conn: conn.execute(sql, (dir_removed, session_id, self.host)))

    def listen(self) -> PostgresRevokeListener:
        return PostgresRevokeListener(self._connect(), self.host)


class PostgresRevokeListener(RevokeListener):
    """``LISTEN broker_revoke`` on a connection of its own, holding this host's listener lock while open."""

    def __init__(self, connection: Any, host: str) -> None:
        self._connection = connection
        try:
            connection.execute(f"LISTEN {CHANNEL}")
            connection.execute("SELECT pg_try_advisory_lock(%s)", (lock_key(LISTENER + host),))
        except Exception as exc:
            self.close()
            raise StoreError(f"session store: cannot listen for revokes: {first_line(exc)}") from None

    def heard(self, timeout: float) -> list[str]:
        import psycopg

        try:
            payloads = [n.payload for n in self._connection.notifies(timeout=timeout, stop_after=1)]
        except psycopg.Error as exc:
            raise StoreError(f"session store: the listening connection was lost: {first_line(exc)}") from None
        return [payload for payload in payloads if is_session_id(payload)]

    def close(self) -> None:
        try:
            self._connection.close()  # the listener lock goes with it
        except Exception:  # closing a broken connection must not fail the caller
            return
