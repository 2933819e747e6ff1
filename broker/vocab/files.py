"""The one reader for files the broker parses or trusts: bounded, regular files only, never hanging.

Manifests, the config, policy files and the broker's own secret files all go
through ``read_regular_file``. It opens without blocking (a FIFO or a device
cannot stall the broker), refuses anything ``fstat`` does not call a regular
file (FIFO, device, directory, socket), and reads at most the limit. Errors
name the file, never its content.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from broker.vocab.errors import BadInput


def shown_path(path: Path | str) -> str:
    """A path for an error message: as given when printable, escaped otherwise."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def read_regular_file(
    path: Path | str,
    *,
    what: str,
    max_bytes: int,
    error: type[BadInput],
    follow_symlinks: bool = True,
    missing_hint: str = "",
) -> tuple[bytes, os.stat_result]:
    """The content of ``path`` (at most ``max_bytes``) and its ``fstat``; ``error`` names ``what`` and the file."""
    name = f"{what} {shown_path(path)}"
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{name} not found{missing_hint}") from None
    except OSError as exc:
        raise error(f"{name}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise error(f"{name} is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{name} is not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise error(f"{name}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise error(f"{name} is larger than {max_bytes // 1024} KiB")
    return b"".join(chunks), info
