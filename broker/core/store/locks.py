"""Cross-process locks in ``state_dir/locks`` (``filelock``): one per session, one for sweep.

``issue`` holds its session's lock from creation to completion and ``revoke``
takes it too, so ``sweep`` can tell a session a crashed broker left half-done
(lock free) from one a live broker is working on (lock held): the kernel
releases the lock when its holder dies.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from filelock import FileLock

from broker.vocab.holding import Lock
from broker.vocab.session_ids import check_session_id


def lock_dir(state_dir: Path) -> Path:
    path = state_dir / "locks"
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def _session_lock_path(state_dir: Path, session_id: str) -> Path:
    """The lock file of a session; an id of any other shape never becomes a path."""
    name = f"{check_session_id(session_id, 'session id')}.lock"
    return lock_dir(state_dir) / name


def session_lock(state_dir: Path, session_id: str) -> FileLock:
    return FileLock(str(_session_lock_path(state_dir, session_id)), thread_local=False)


def try_lock(lock: Lock) -> bool:
    """Take ``lock`` if it is free right now."""
    try:
        lock.acquire(timeout=0)
    except TimeoutError:  # filelock's Timeout is one
        return False
    return True


def sweep_lock(state_dir: Path) -> FileLock:
    return FileLock(str(lock_dir(state_dir) / "sweep.lock"), thread_local=False)


def remove_session_lock(state_dir: Path, session_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_session_lock_path(state_dir, session_id))
