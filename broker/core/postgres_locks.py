"""Locks every broker sharing a PostgreSQL store honours: advisory locks on one connection per process.

A session's lock (held by the ``issue`` or ``exec`` working on it) and a
provider's per-role lock must be seen by brokers on other hosts, and must
go away when their holder dies, so ``sweep`` on another host can tell a
crashed broker's session from a running one: a session-level advisory lock
does both (the server drops it with the connection). One connection per
process holds them all; a lock this process already holds counts as taken
for its other threads too, as a second file lock on one path would.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from broker.vocab.errors import StoreError
from broker.vocab.holding import holding
from providers.base import DenyRecord, FleetState

#: How long a provider waits for another host's hold on a role lock before giving up.
ROLE_LOCK_TIMEOUT = 120.0


def lock_key(name: str) -> int:
    """The 64-bit advisory lock key of a lock name."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class AdvisoryLocks:
    """This process's advisory locks, on a connection of their own (never inside a store transaction)."""

    def __init__(self, connect: Callable[[], Any], where: str) -> None:
        self._connect = connect
        self._where = where
        self._connection: Any = None
        self._guard = threading.Lock()
        self._held: set[int] = set()

    def try_take(self, key: int) -> bool:
        import psycopg

        with self._guard:
            if key in self._held:
                return False
            try:
                if self._connection is None or self._connection.closed:
                    self._held.clear()  # a lost connection lost its locks with it
                    self._connection = self._connect()
                row = self._connection.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            except psycopg.Error as exc:
                self._drop()
                raise StoreError(f"session store {self._where}: cannot take a lock: {first_line(exc)}") from None
            if row and row[0]:
                self._held.add(key)
                return True
            return False

    def give_back(self, key: int) -> None:
        import psycopg

        with self._guard:
            if key not in self._held:
                return
            self._held.discard(key)
            try:
                self._connection.execute("SELECT pg_advisory_unlock(%s)", (key,))
            except psycopg.Error:
                self._drop()  # the server released every lock of the lost connection

    def _drop(self) -> None:
        self._held.clear()
        if self._connection is not None:
            with contextlib.suppress(Exception):
                self._connection.close()
        self._connection = None

    def close(self) -> None:
        with self._guard:
            self._drop()


class AdvisoryLock:
    """One named lock with the ``acquire(timeout=)``/``release()`` of a file lock; re-entrant per object."""

    def __init__(self, locks: AdvisoryLocks, name: str) -> None:
        self._locks = locks
        self._key = lock_key(name)
        self._count = 0

    @property
    def is_locked(self) -> bool:
        return self._count > 0

    def acquire(self, timeout: float = -1) -> AdvisoryLock:
        if self._count:
            self._count += 1
            return self
        deadline = None if timeout < 0 else time.monotonic() + timeout
        pause = 0.01
        while not self._locks.try_take(self._key):
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("advisory lock held elsewhere")
            time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))
            pause = min(pause * 2, 0.1)
        self._count = 1
        return self

    def release(self) -> None:
        if self._count == 0:
            return
        self._count -= 1
        if self._count == 0:
            self._locks.give_back(self._key)


class PostgresFleetState(FleetState):
    """The providers' shared locks and deny records, in the store's database."""

    def __init__(self, locks: AdvisoryLocks, run: Callable[[str, tuple[Any, ...]], list[Any]]) -> None:
        self._locks = locks
        self._run = run
        self._mine = threading.local()  # names this thread holds: taking one again nests

    @contextlib.contextmanager
    def lock(self, name: str, what: str) -> Iterator[None]:
        held: set[str] = self._mine.__dict__.setdefault("names", set())
        if name in held:
            yield
            return
        with holding(AdvisoryLock(self._locks, "provider:" + name), what, timeout=ROLE_LOCK_TIMEOUT):
            held.add(name)
            try:
                yield
            finally:
                held.discard(name)

    def add_deny_records(self, scope: str, records: Sequence[DenyRecord]) -> None:
        for record in records:
            self._run(
                "INSERT INTO deny_records (scope, key, value, until) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (scope, key, value) DO UPDATE SET until = GREATEST(deny_records.until, EXCLUDED.until)",
                (scope, record.key, record.value, record.until),
            )

    def deny_records(self, scope: str, now: datetime) -> list[DenyRecord]:
        rows = self._run(
            "SELECT until, key, value FROM deny_records WHERE scope = %s AND until > %s ORDER BY until, key, value",
            (scope, now),
        )
        return [DenyRecord(row[0].astimezone(UTC), str(row[1]), str(row[2])) for row in rows]


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]
