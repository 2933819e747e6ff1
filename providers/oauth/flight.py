"""One refresh at a time per refresh token, across this process's threads, this host's brokers and a fleet's.

A rotating authorisation server answers a refresh token used twice by
revoking every token of its family (the reuse of a stolen one looks just so),
so two sessions of one refresh token must never refresh at once: the second
would present the token the first just rotated away. The flight is held from
reading the token to writing its successor back: a thread lock of this
process (kept per process, whatever provider object asks), and beside it a
lock file in the host's ``state_dir/locks`` (``SharesLocks.use_lock_dir``),
or, with a PostgreSQL store, the store's advisory lock every host of the
fleet honours (``SharesLocks.use_fleet``; the holder's death releases both).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from broker.vocab.holding import holding
from providers.capabilities import FleetState

_THREAD_LOCKS: dict[str, threading.Lock] = {}
_FILE_LOCKS: dict[str, Any] = {}
_GUARD = threading.Lock()
#: How long a refresh waits for the others of its token (each is one round trip; a fleet's queue behind it).
WAIT = 120.0


class RefreshFlight:
    def __init__(self, token_url: str, client_id: str, where: str) -> None:
        self.key = hashlib.sha256(f"{token_url}|{client_id}|{where}".encode()).hexdigest()[:24]
        self.what = f"the refresh token in {where}"
        self.lock_dir: Path | None = None
        self.fleet: FleetState | None = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The token's flight, for as long as the context lasts (a ``StoreError`` when not had in ``WAIT``)."""
        with _GUARD:
            thread_lock = _THREAD_LOCKS.setdefault(self.key, threading.Lock())
            file_lock = None
            if self.fleet is None and self.lock_dir is not None:
                from filelock import FileLock

                path = str(self.lock_dir / f"oauth-refresh-{self.key}.lock")
                file_lock = _FILE_LOCKS.setdefault(path, FileLock(path, thread_local=False))
        with holding(_Waiting(thread_lock), self.what, timeout=WAIT):
            if self.fleet is not None:
                with self.fleet.lock("oauth-refresh:" + self.key, self.what):
                    yield
            elif file_lock is not None:
                with holding(file_lock, self.what, timeout=WAIT):
                    yield
            else:
                yield


class _Waiting:
    """A thread lock with the ``acquire(timeout=)`` that raises ``TimeoutError``, as ``holding`` takes locks."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def acquire(self, timeout: float = -1) -> bool:
        if not self._lock.acquire(timeout=timeout):
            raise TimeoutError("held by another thread")
        return True

    def release(self) -> None:
        self._lock.release()
