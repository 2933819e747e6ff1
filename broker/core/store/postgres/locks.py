"""Locks every broker sharing a PostgreSQL store honours: advisory locks on the store's one connection.

A session's lock (held by the ``issue`` or ``exec`` working on it) and a
provider's per-role lock must be seen by brokers on other hosts, and must
go away when their holder dies, so ``sweep`` on another host can tell a
crashed broker's session from a running one: a session-level advisory lock
does both (the server drops it with the connection). A lock this process
already holds counts as taken for its other threads too, as a second file
lock on one path would.

The locks live on the same connection as every statement the store runs,
so the server ending that connection (a restart, an idle timeout, a
terminated backend) cannot go unnoticed: psycopg never reconnects on its
own, the holder's next step fails, and a connection lost while locks were
held leaves them *lost*. Another broker may hold them by then, so until
every lost lock has been released by the code that took it, each step of
this process fails with a ``StoreError`` instead of running unguarded.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from broker.vocab.errors import StoreError
from broker.vocab.holding import holding
from providers.capabilities import DenyRecord, FleetState

#: How long a provider waits for other hosts' holds on a role lock before giving up. An AWS role's budget lock is
#: held for a whole issue, so a fleet's issues on one role queue behind each other; nothing is minted while waiting.
ROLE_LOCK_TIMEOUT = 300.0


def lock_key(name: str) -> int:
    """The 64-bit advisory lock key of a lock name."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class LockTable(Protocol):
    def try_take(self, key: int) -> bool: ...

    def give_back(self, key: int) -> bool: ...


class AdvisoryLocks:
    """Which advisory locks this process holds on the store's connection, and which it lost with one.

    The store calls these with its connection lock held; ``take``/``drop``
    run their statement through the store (``call``), so a failure is the
    store's ``StoreError`` and a lost connection reaches ``connection_lost``.
    """

    def __init__(self, where: str) -> None:
        self._where = where
        self._held: set[int] = set()
        self._lost: set[int] = set()

    def check(self) -> None:
        """Refuse any step while a lock lost with its connection is still thought held by its taker."""
        if self._lost:
            raise StoreError(
                f"session store {self._where}: the connection holding this broker's locks was lost (database"
                " restarted or connection ended); another broker may hold them now, so this one stops: run broker sweep"
            )

    def connection_lost(self) -> None:
        self._lost |= self._held
        self._held.clear()

    def take(self, key: int, call: Callable[[Callable[[Any], Any]], Any]) -> bool:
        self.check()
        if key in self._held:
            return False
        row = call(lambda conn: conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone())
        if row and row[0]:
            self._held.add(key)
            return True
        return False

    def drop(self, key: int, call: Callable[[Callable[[Any], Any]], Any]) -> bool:
        """Release ``key``; whether it was still held to the end (False: lost with the connection)."""
        if key in self._lost:
            self._lost.discard(key)  # the server let go of it with the connection
            return False
        if key not in self._held:
            return True
        try:
            call(lambda conn: conn.execute("SELECT pg_advisory_unlock(%s)", (key,)))
        except StoreError:
            self._lost.discard(key)  # the connection went with it: so did the lock
            return False
        self._held.discard(key)
        return True


class AdvisoryLock:
    """One named lock with the ``acquire(timeout=)``/``release()`` of a file lock; re-entrant per object."""

    def __init__(self, locks: LockTable, name: str) -> None:
        self._locks = locks
        self._key = lock_key(name)
        self._count = 0
        self.kept = True  # False once a release found the lock lost with its connection

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
            self.kept = self._locks.give_back(self._key)


class PostgresFleetState(FleetState):
    """The providers' shared locks and deny records, in the store's database."""

    def __init__(self, locks: LockTable, run: Callable[[str, tuple[Any, ...]], list[Any]]) -> None:
        self._locks = locks
        self._run = run
        self._mine = threading.local()  # names this thread holds: taking one again nests

    @contextlib.contextmanager
    def lock(self, name: str, what: str) -> Iterator[None]:
        held: set[str] = self._mine.__dict__.setdefault("names", set())
        if name in held:
            yield
            return
        lock = AdvisoryLock(self._locks, "provider:" + name)
        with holding(lock, what, timeout=ROLE_LOCK_TIMEOUT):
            held.add(name)
            try:
                yield
            finally:
                held.discard(name)
        if not lock.kept:  # what was written under it may have raced another host's write: redo it under a lock
            raise StoreError(
                f"{what}: the lock was lost with the store's connection during the write; run broker sweep"
            )

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
