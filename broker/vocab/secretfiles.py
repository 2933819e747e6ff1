"""Reading the broker's own secret files (provider tokens, private keys).

They must be regular files (read by ``inputfiles``, without following a
symbolic link), not readable by group or others, and small; the content
comes back as a ``Secret``. A problem is a ``ConfigError`` naming the
file, never its content.
"""

from __future__ import annotations

import stat
from pathlib import Path

from broker.vocab.errors import ConfigError
from broker.vocab.files import read_regular_file
from broker.vocab.secret import Secret

MAX_SECRET_FILE_BYTES = 64 * 1024


def read_secret_file(path: Path, what: str, *, strip: bool = True) -> Secret:
    data, info = read_regular_file(
        path, what=what, max_bytes=MAX_SECRET_FILE_BYTES, error=ConfigError, follow_symlinks=False
    )
    if info.st_mode & 0o077:
        raise ConfigError(f"{what} {path} is readable by others (mode {stat.S_IMODE(info.st_mode):04o}); chmod 600 it")
    if strip:
        data = data.strip()
    if not data:
        raise ConfigError(f"{what} {path} is empty")
    return Secret(data)
