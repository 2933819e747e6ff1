"""A bounded holding place for a body that must be checked before any of it goes upstream.

The first ``memory`` bytes stay in memory; past that, everything moves to a
file with no name, opened in the directory the caller gives (the session's
tmpfs): ``tempfile.TemporaryFile`` opens it with ``O_TMPFILE`` (or creates and
unlinks it at once), mode 0600. Why that is safe: no path leads to the file,
so nothing in the sandbox (or anyone else) can open it, even where that
directory is visible; tmpfs is memory, so the body never reaches a disk and
is gone when the descriptor closes (``close``, or the process ends) or the
tmpfs is unmounted at revoke; and ``limit`` bounds it, as does the tmpfs size
(a full tmpfs is a refusal, not a crash). Without a directory the spool
holds at most ``memory`` bytes.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class SpoolLimits:
    """``memory``: bytes held in memory per request; ``limit``: bytes in all (memory and file) per request."""

    memory: int = 256 * 1024
    limit: int = 256 * 1024 * 1024
    piece: int = 64 * 1024  # the size of the pieces read back


class SpoolFull(Exception):
    """The body is over the spool's bound (or the directory has no room left)."""


class Spool:
    """Bytes written once, then read back in pieces; ``close`` drops them."""

    def __init__(self, directory: Path | None, limits: SpoolLimits) -> None:
        self._directory = directory
        self._limits = limits
        self._memory = bytearray()
        self._file: IO[bytes] | None = None
        self.size = 0

    def write(self, data: bytes) -> None:
        if not data:
            return
        bound = self._limits.limit if self._directory is not None else self._limits.memory
        if self.size + len(data) > bound:
            raise SpoolFull(f"the body is over the proxy's bound of {bound} bytes")
        self.size += len(data)
        if self._file is None and len(self._memory) + len(data) <= self._limits.memory:
            self._memory += data
            return
        try:
            if self._file is None:
                assert self._directory is not None  # the bound above keeps a directory-less spool in memory
                self._file = tempfile.TemporaryFile(dir=self._directory)  # noqa: SIM115 (closed by close())
                self._file.write(self._memory)
                self._memory = bytearray()
            self._file.write(data)
        except OSError as error:
            raise SpoolFull(f"the spool has no room for the body ({error.strerror})") from None

    def pieces(self) -> Iterator[bytes]:
        """What was written, from the start, in pieces of at most ``limits.piece`` bytes."""
        if self._file is None:
            view = bytes(self._memory)
            for start in range(0, len(view), self._limits.piece):
                yield view[start : start + self._limits.piece]
            return
        self._file.flush()
        self._file.seek(0)
        while piece := self._file.read(self._limits.piece):
            yield piece

    def close(self) -> None:
        self._memory = bytearray()
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
