"""Who waits for whom on one role: the AWS provider's reservations and deny-policy writers.

A role's deny budget (``providers.aws.deny_policy.budget``) is checked and spent under a
reservation lock: a re-entrant thread lock of this process and, beside it,
a lock file in ``lock_dir`` shared by this host's brokers, or, in a fleet,
the store's lock shared by every host. The thread locks and lock files are
kept per process, whatever provider object asks: two objects for one role
at one endpoint wait for each other, and a thread holding the lock may take
it again. A role's deny policy (``providers.aws.deny_policy.writes``) is written by one
thread of this provider at a time (``writer``) and, with a ``lock_dir``, one
broker of this host at a time (``host_writer``).
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

_THREAD_LOCKS: dict[str, threading.RLock] = {}
_FILE_LOCKS: dict[str, Any] = {}
_GUARD = threading.Lock()


class RoleLocks:
    def __init__(self, endpoint_url: str | None) -> None:
        self.endpoint_url = endpoint_url
        self.lock_dir: Path | None = None  # where this host's brokers keep lock files (none: this process only)
        self.fleet: FleetState | None = None  # the locks shared with other hosts (none: not a fleet)
        self._writers: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def key(self, role_name: str) -> str:
        """The role at this endpoint, as lock names and fleet scopes know it."""
        return hashlib.sha256(f"{self.endpoint_url or ''}|{role_name}".encode()).hexdigest()[:24]

    @contextlib.contextmanager
    def reserving(self, role_name: str) -> Iterator[None]:
        """This role's reservation lock: a re-entrant thread lock, and a lock shared by the fleet or the host."""
        key = self.key(role_name)
        if self.fleet is not None:
            with _GUARD:
                thread_lock = _THREAD_LOCKS.setdefault(key, threading.RLock())
            with thread_lock, self.fleet.lock("aws-budget:" + key, f"the revocation budget of role {role_name}"):
                yield
            return
        with _GUARD:
            thread_lock = _THREAD_LOCKS.setdefault(key, threading.RLock())
            file_lock = None
            if self.lock_dir is not None:
                from filelock import FileLock

                path = str(self.lock_dir / f"aws-budget-{key}.lock")
                file_lock = _FILE_LOCKS.setdefault(path, FileLock(path, thread_local=False))
        with thread_lock:
            if file_lock is None:
                yield
                return
            with holding(file_lock, f"the revocation budget of role {role_name}"):
                yield

    def writer(self, role_name: str) -> threading.Lock:
        """The lock this provider's threads take before writing the role's deny policy."""
        with self._guard:
            return self._writers.setdefault(role_name, threading.Lock())

    def host_writer(self, role_name: str) -> Any:
        """The file lock that serialises this host's brokers writing the role's deny policy (None without a
        ``lock_dir``)."""
        if self.lock_dir is None:
            return None
        from filelock import FileLock

        return FileLock(str(self.lock_dir / f"aws-role-{self.key(role_name)}.lock"), timeout=60, thread_local=False)
