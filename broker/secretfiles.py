"""Reading the broker's own secret files (provider tokens, private keys).

They must be regular files, not readable by group or others, and small; the
content comes back as a ``Secret``. A problem is a ``ConfigError`` naming the
file, never its content.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from broker.errors import ConfigError
from broker.secret import Secret

MAX_SECRET_FILE_BYTES = 64 * 1024


def read_secret_file(path: Path, what: str, *, strip: bool = True) -> Secret:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} not found") from None
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{what} {path} is not a regular file")
        if info.st_mode & 0o077:
            raise ConfigError(
                f"{what} {path} is readable by others (mode {stat.S_IMODE(info.st_mode):04o}); chmod 600 it"
            )
        data = os.read(fd, MAX_SECRET_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise ConfigError(f"{what} {path} is larger than 64 KiB")
    if strip:
        data = data.strip()
    if not data:
        raise ConfigError(f"{what} {path} is empty")
    return Secret(data)
