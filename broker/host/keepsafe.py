"""Revocation secrets kept on tmpfs only, never on persistent disk.

Some credentials can only be revoked with themselves (a GitHub installation
token). The broker keeps such a secret in ``runtime_dir/.keep`` (a tmpfs of
its own when the broker mounts, else a 0700 directory on the tmpfs
``runtime_dir``) until the credential is revoked or expired, so a ``sweep``
after a broker crash can still revoke it. A reboot loses them, and with them
the credentials' only holder: they expire at the provider (an hour at most).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path

from broker.host import mounts
from broker.host.sessiondir import DIR_OPEN, RuntimeDir
from broker.vocab.errors import RuntimeDirError
from broker.vocab.files import read_bounded, write_private_file
from broker.vocab.secret import Secret

KEEP_DIR = ".keep"
KEEP_TMPFS_SIZE = "16m"
MAX_KEPT_BYTES = 64 * 1024
_NAME = re.compile(r"[a-z0-9][a-z0-9~-]{0,63}")  # "~": renewed generations (kv~2)


class KeepSafe:
    def __init__(self, runtime_dir: Path) -> None:
        self.path = runtime_dir / KEEP_DIR

    def _ensure(self, runtime: RuntimeDir) -> None:
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.path, 0o700)
        info = os.lstat(self.path)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise RuntimeDirError(f"{self.path} is not a directory (a symbolic link?); remove it")
        if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
            raise RuntimeDirError(f"{self.path} must be owned by the broker's user with mode 0700")
        if runtime.mount_per_session and not mounts.is_mount_point(self.path):
            try:
                mounts.mount_tmpfs(self.path, size=KEEP_TMPFS_SIZE, mode=0o700, uid=os.geteuid(), gid=os.getegid())
            except OSError as exc:
                if not mounts.is_mount_point(self.path):  # a concurrent broker may have won
                    raise RuntimeDirError(f"cannot mount a tmpfs at {self.path}: {exc.strerror}") from None
        if not mounts.is_tmpfs(self.path):
            raise RuntimeDirError(f"{self.path} is not on tmpfs")

    @staticmethod
    def _file(session_id: str, name: str) -> str:
        if not (_NAME.fullmatch(session_id) and _NAME.fullmatch(name.replace("_", "-"))):
            raise ValueError("bad session or credential name")
        return f"{session_id}.{name}"

    def put(self, runtime: RuntimeDir, session_id: str, name: str, secret: Secret) -> None:
        self._ensure(runtime)
        file_name = self._file(session_id, name)
        fd_dir = os.open(self.path, DIR_OPEN)
        try:
            write_private_file(fd_dir, file_name, secret.reveal_bytes(), mode=0o400)
        finally:
            os.close(fd_dir)

    def get(self, session_id: str, name: str) -> Secret | None:
        try:
            data, _ = read_bounded(self.path / self._file(session_id, name), MAX_KEPT_BYTES, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):  # nothing kept, or no usable keep-safe to keep it in
            return None
        return Secret(data) if data else None

    def rename(self, session_id: str, name: str, new_name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.rename(self.path / self._file(session_id, name), self.path / self._file(session_id, new_name))

    def drop(self, session_id: str, name: str) -> None:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.unlink(self.path / self._file(session_id, name))

    def held(self) -> list[tuple[str, str]]:
        """(session, credential) pairs with a kept secret."""
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return []
        pairs = []
        for file_name in names:
            if not file_name.startswith("."):
                session_id, _, name = file_name.partition(".")
                pairs.append((session_id, name))
        return pairs
