"""The fleet's issuance log in PostgreSQL: one hash chain, in one ``seq`` order, for every host of a store.

The records and the hash rule are the file log's (``broker.audit.log``), so
one verifier serves both: each record is stored as its exact canonical JSON
text (hashes re-verify byte for byte) beside its ``seq``, ``hash`` and the
host that wrote it. An append reads the head and inserts the next record in
one transaction under a transaction-scoped advisory lock, so hosts appending
together never fork the chain (the primary key on ``seq`` refuses a duplicate
whatever happens). A checkpoint names the host that signed it (``host``), and
the host's public key is listed in ``audit_keys`` for auditors. The
connection is the store's: ``run(step)`` runs ``step(connection)`` and turns
a database error into a one-line ``StoreError``; this module never imports
the core.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from broker.audit.keys import AuditKeys
from broker.audit.log import GENESIS, Entry, canonical, checkpoint_fields, new_record
from broker.vocab.errors import ConfigError, StoreError
from broker.vocab.tracing import span

T = TypeVar("T")

Runner = Callable[[Callable[[Any], Any]], Any]

#: The advisory lock every host's append holds for its transaction (any 64-bit number no other lock uses).
LOG_LOCK = 0x62726F6B65720002
FETCH_ROWS = 20_000


class PostgresIssuanceLog:
    """The ``AppendLog`` of a fleet: records go to the ``issuance_log`` table of the shared store."""

    def __init__(self, run: Runner, keys: AuditKeys, host: str) -> None:
        self._run = run
        self.keys = keys
        self.host = host
        self.appended = 0

    def append(
        self, event: str, *, session: str | None, task: str | None, requester: str, **fields: Any
    ) -> dict[str, Any]:
        with span("log.append", event=event, session=session) as traced:
            record: dict[str, Any] = self._run(lambda conn: self._append(conn, event, session, task, requester, fields))
            traced.set(seq=record["seq"])
        self.appended += 1
        return record

    def append_many(self, entries: Sequence[Entry]) -> list[dict[str, Any]]:
        """Every entry in one transaction, under the one advisory lock: a chained run of records, or none."""
        if not entries:
            return []
        records: list[dict[str, Any]] = self._run(lambda conn: self._append_all(conn, entries))
        self.appended += len(records)
        return records

    def head(self) -> tuple[int, str]:
        head: tuple[int, str] = self._run(_head)
        return head

    def checkpoint(self, requester: str) -> dict[str, Any] | None:
        if self.appended == 0:
            return None
        record: dict[str, Any] = self._run(lambda conn: self._append(conn, "checkpoint", None, None, requester, None))
        self.appended = 0
        return record

    def list_key(self) -> None:
        """List this host's signing key for auditors (once; a key listed for another host is refused)."""
        self._run(lambda conn: self._list_key(conn))

    def _append(
        self,
        conn: Any,
        event: str,
        session: str | None,
        task: str | None,
        requester: str,
        fields: dict[str, Any] | None,
    ) -> dict[str, Any]:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOG_LOCK,))
            seq, prev = _head(conn)
            if fields is None:  # a checkpoint: signs the head it follows, names its host and lists its key
                self._list_key(conn)
                fields = {"host": self.host, **checkpoint_fields(self.keys, seq, prev)}
            record = new_record(seq + 1, prev, event, session, task, requester, fields)
            conn.execute(
                "INSERT INTO issuance_log (seq, hash, host, record) VALUES (%s, %s, %s, %s)",
                (record["seq"], record["hash"], self.host, canonical(record).decode("utf-8")),
            )
        return record

    def _append_all(self, conn: Any, entries: Sequence[Entry]) -> list[dict[str, Any]]:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOG_LOCK,))
            seq, prev = _head(conn)
            records = []
            for entry in entries:
                seq += 1
                record = new_record(
                    seq, prev, entry.event, entry.session, entry.task, entry.requester, dict(entry.fields)
                )
                records.append(record)
                prev = record["hash"]
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO issuance_log (seq, hash, host, record) VALUES (%s, %s, %s, %s)",
                    [(r["seq"], r["hash"], self.host, canonical(r).decode("utf-8")) for r in records],
                )
        return records

    def _list_key(self, conn: Any) -> None:
        public = "ed25519:" + base64.b64encode(self.keys.signing.public_raw()).decode()
        conn.execute(
            "INSERT INTO audit_keys (key_id, host, public_key) VALUES (%s, %s, %s) ON CONFLICT (key_id) DO NOTHING",
            (self.keys.key_id, self.host, public),
        )
        row = conn.execute("SELECT host FROM audit_keys WHERE key_id=%s", (self.keys.key_id,)).fetchone()
        if row is not None and row[0] != self.host:
            raise ConfigError(
                f"audit key {self.keys.key_id} is listed for host {str(row[0])[:64]}; each host needs its own audit_key"
            )


def _head(conn: Any) -> tuple[int, str]:
    row = conn.execute("SELECT seq, hash FROM issuance_log ORDER BY seq DESC LIMIT 1").fetchone()
    return (int(row[0]), str(row[1])) if row else (0, GENESIS)


def stream_lines(conn: Any) -> Iterator[bytes]:
    """Every record in ``seq`` order as a log line, through a server-side cursor (bounded memory)."""
    with conn.transaction(), conn.cursor(name="broker_issuance_log") as cursor:
        cursor.itersize = FETCH_ROWS
        cursor.execute("SELECT record FROM issuance_log ORDER BY seq")
        for (text,) in cursor:
            yield text.encode("utf-8") + b"\n"


def lines_containing(conn: Any, needles: Iterable[bytes]) -> Iterator[bytes]:
    """The records (without newline) holding any of ``needles``, in ``seq`` order: ``audit lookup``'s search."""
    wanted = [needle.decode("utf-8") for needle in needles]
    if not wanted:
        return
    rows = conn.execute(
        "SELECT record FROM issuance_log"
        " WHERE EXISTS (SELECT 1 FROM unnest(%s::text[]) AS n WHERE strpos(record, n) > 0) ORDER BY seq",
        (wanted,),
    )
    for (text,) in rows:
        yield text.encode("utf-8")


def listed_keys(conn: Any) -> list[tuple[str, str, str, str]]:
    """The hosts' listed signing keys, oldest first: (key_id, host, ``ed25519:<base64>``, created)."""
    rows = conn.execute("SELECT key_id, host, public_key, created_at FROM audit_keys ORDER BY created_at, key_id")
    return [(str(r[0]), str(r[1]), str(r[2]), r[3].isoformat()) for r in rows.fetchall()]


class TableSource:
    """The fleet's log read as an auditor reads a file (``broker.audit.query.LogSource``), on a read connection."""

    def __init__(self, conn: Any, where: str) -> None:
        self._conn = conn
        self.where = where

    def lines(self) -> Iterator[bytes]:
        return self._guarded(stream_lines(self._conn))

    def lines_containing(self, needles: Iterable[bytes]) -> Iterator[bytes]:
        return self._guarded(lines_containing(self._conn, needles))

    def keys(self) -> list[tuple[str, str, str, str]]:
        """The signing keys the hosts listed (read from the store: an auditor pins them instead)."""

        def rows() -> Iterator[tuple[str, str, str, str]]:
            yield from listed_keys(self._conn)

        return list(self._guarded(rows()))

    def _guarded(self, rows: Iterator[T]) -> Iterator[T]:
        import psycopg

        try:
            yield from rows
        except psycopg.Error as exc:
            text = str(exc).strip().splitlines()
            raise StoreError(f"issuance log {self.where}: {(text[0] if text else type(exc).__name__)[:200]}") from None
