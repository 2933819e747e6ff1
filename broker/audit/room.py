"""The issuance log's room on its file system: ``state_dir``, which the SQLite session store shares.

A full disk stops the log, and with it every session's proxy (503) and every
issue; it must never stop a revoke or a sweep, which are how sessions end
and credentials die. So, while ``[audit] min_free`` is not 0:

- a new issue starts only while the file system has ``min_free`` free
  (default 1 GiB) besides the reserve: ``check_issue`` raises ``NoRoom``
  (exit 2) otherwise, so sessions stop starting long before the disk is full;
- the reserve, ``state_dir/issuance.reserve``: ``RESERVE`` bytes (16 MiB, or
  ``min_free`` when smaller) allocated on disk (``posix_fallocate``) by the
  issue that finds it missing. A revoke or a sweep that finds less free than
  that gives it back (``release``) before it opens the store or writes, so
  its records and store updates have that room whatever filled the disk;
- a running session's evidence is written only while the free room is at
  least the reserve's size and the reserve is whole (``check_evidence``): the
  proxies never take the room kept for revoke and sweep, and once it was given
  back they refuse (503) until an issue finds ``min_free`` again and makes the
  reserve anew.

In a fleet the log is the PostgreSQL table, on the database server's disk,
which no broker can see: nothing here applies (``broker.core.store.state_room``
gives none); the per-session evidence budget still bounds what each session
adds, and the database's free space is its operator's to watch.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from broker.vocab.errors import NoRoom, StoreError
from broker.vocab.sizes import format_size

RESERVE_NAME = "issuance.reserve"
RESERVE = 16 << 20


class LogRoom:
    """Free room on ``state_dir``'s file system, measured against ``min_free`` and the reserve kept in it."""

    def __init__(self, state_dir: Path, min_free: int) -> None:
        self.state_dir = state_dir
        self.min_free = min_free
        self.reserve_bytes = min(RESERVE, min_free)
        self.reserve_path = state_dir / RESERVE_NAME

    def free(self) -> int:
        """Bytes an unprivileged writer may still use there (what ``df`` calls available)."""
        try:
            info = os.statvfs(self.state_dir)
        except OSError as exc:
            raise StoreError(f"state_dir {self.state_dir}: {exc.strerror}") from None
        return info.f_bavail * info.f_frsize

    def reserved(self) -> int:
        """Bytes the reserve holds (0 when it was given back)."""
        try:
            return os.lstat(self.reserve_path).st_size
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise StoreError(f"state_dir reserve {self.reserve_path}: {exc.strerror}") from None

    def check_issue(self) -> None:
        """Refuse to start an issue below ``min_free`` (the reserve, when missing, counted first); make the
        reserve when it is missing and there is room."""
        if self.min_free == 0:
            return
        free = self.free()
        missing = max(0, self.reserve_bytes - self.reserved())
        if free - missing < self.min_free:
            with_reserve = f" and the {format_size(missing)} kept for revoke and sweep" if missing else ""
            raise NoRoom(
                f"state_dir {self.state_dir} has {format_size(free)} free, less than [audit] min_free"
                f" ({format_size(self.min_free)}){with_reserve}: no new session is issued until there is room;"
                " free space there or lower [audit] min_free (revoke and sweep still work)"
            )
        if missing:
            self._make_reserve()

    def check_evidence(self) -> None:
        """Refuse (``NoRoom``) to write a session's evidence into the room kept for revoke and sweep."""
        if self.reserve_bytes == 0:
            return
        free = self.free()
        if free < self.reserve_bytes or self.reserved() < self.reserve_bytes:
            raise NoRoom(
                f"state_dir {self.state_dir} is down to the room kept for revoke and sweep ({format_size(free)}"
                " free): the session's evidence waits, and its proxy refuses, until there is room"
            )

    def release(self) -> bool:
        """Give the reserve's room back when the file system has less free than it holds (before a revoke or a
        sweep writes); whether it was given back."""
        if self.reserve_bytes == 0 or self.free() >= self.reserve_bytes:
            return False
        try:
            os.unlink(self.reserve_path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StoreError(f"state_dir reserve {self.reserve_path}: {exc.strerror}") from None
        return True

    def _make_reserve(self) -> None:
        try:
            fd = os.open(self.reserve_path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreError(f"state_dir reserve {self.reserve_path}: {exc.strerror}") from None
        try:
            os.posix_fallocate(fd, 0, self.reserve_bytes)  # blocks on disk, not a hole
            if os.fstat(fd).st_size > self.reserve_bytes:  # min_free was lowered
                os.ftruncate(fd, self.reserve_bytes)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise NoRoom(
                    f"state_dir {self.state_dir} has no room for the {format_size(self.reserve_bytes)} kept for"
                    " revoke and sweep: no new session is issued until there is room; free space there or lower"
                    " [audit] min_free"
                ) from None
            raise StoreError(f"state_dir reserve {self.reserve_path}: {exc.strerror}") from None
        finally:
            os.close(fd)
