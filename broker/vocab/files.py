"""The one private-file writer and the one bounded reader: security-critical steps written once.

``write_private_file`` puts a complete file in place without a window: a new
temporary created ``O_EXCL | O_NOFOLLOW`` in the target directory (a path, or
a directory descriptor opened without following links) with its final mode
(and owner) from the start, fully written, then renamed (or linked, when an
existing file must win) over the name. A reader never sees half a secret and
a planted link is never written through.

``read_bounded`` opens without blocking (a FIFO or a device cannot stall the
broker), refuses what ``fstat`` does not call a regular file, and reads at
most a limit. ``read_regular_file`` words its failures for manifests, the
config and policy files; ``broker.vocab.secret.read_secret_file`` adds the
broker's own secret files' rules on top of it. Errors name the file, never its
content. No hashing here: the thin client reads its config through this
module, and hashlib is no part of its cold start.
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import TYPE_CHECKING

from broker.vocab.errors import BadInput

if TYPE_CHECKING:  # annotations only: the thin client reads its config through this module
    from collections.abc import Iterable, Iterator
    from pathlib import Path

_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class NotRegularFile(OSError):
    """The path names a directory, FIFO, device or socket."""

    def __init__(self, is_directory: bool) -> None:
        super().__init__("not a regular file")
        self.is_directory = is_directory


class FileTooLarge(OSError):
    """The file holds more than the reader's limit."""


def write_all(fd: int, data: bytes, offset: int | None = None) -> None:
    """All of ``data`` to ``fd`` (at ``offset`` with ``pwrite`` when given), however the kernel splits it."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view) if offset is None else os.pwrite(fd, view, offset)
        view = view[written:]
        if offset is not None:
            offset += written


@contextlib.contextmanager
def _directory(directory: Path | int) -> Iterator[int]:
    if isinstance(directory, int):
        yield directory
        return
    fd = os.open(directory, _DIR_OPEN)
    try:
        yield fd
    finally:
        os.close(fd)


def write_private_file(
    directory: Path | int,
    name: str,
    data: bytes | Iterable[bytes],
    *,
    mode: int,
    owner: tuple[int, int] | None = None,
    durable: bool = False,
    replace: bool = True,
) -> bool:
    """Write ``directory/name`` atomically with exactly ``mode``; False when ``replace=False`` found one there.

    ``directory`` is a path or a descriptor the caller opened (``O_NOFOLLOW`` down
    its own tree); ``owner`` is (uid, gid) for ``fchown``; ``durable`` fsyncs
    before the rename; ``replace=False`` links instead of renaming, so a file
    another process put there first wins. The temporary never outlives the call.
    """
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"bad file name {name!r}")
    with _directory(directory) as dir_fd:
        temporary = f".{name}.{os.urandom(6).hex()}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temporary, flags, mode, dir_fd=dir_fd)
        try:
            try:
                if owner is not None:
                    os.fchown(fd, *owner)
                os.fchmod(fd, mode)
                for chunk in (data,) if isinstance(data, bytes) else data:  # chunks: a large file, streamed
                    write_all(fd, chunk)
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            if replace:
                os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                return True
            try:
                os.link(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            except FileExistsError:
                return False  # another process created it first: theirs stays
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):  # gone already when renamed
                os.unlink(temporary, dir_fd=dir_fd)


def read_bounded(
    path: Path | str, max_bytes: int, *, dir_fd: int | None = None, follow_symlinks: bool = True
) -> tuple[bytes, os.stat_result]:
    """The content of a regular file (at most ``max_bytes``) and its ``fstat``.

    Raises what ``open`` raises (``FileNotFoundError``, ``ELOOP`` for a link
    when not following), ``NotRegularFile``, ``FileTooLarge`` or another ``OSError``.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(stat.S_ISDIR(info.st_mode))
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > max_bytes:
        raise FileTooLarge(f"larger than {max_bytes} bytes")
    return b"".join(chunks), info


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
    """``read_bounded`` for files the broker parses; ``error`` names ``what`` and the file."""
    name = f"{what} {shown_path(path)}"
    try:
        return read_bounded(path, max_bytes, follow_symlinks=follow_symlinks)
    except FileNotFoundError:
        raise error(f"{name} not found{missing_hint}") from None
    except NotRegularFile as exc:
        raise error(f"{name} is a directory" if exc.is_directory else f"{name} is not a regular file") from None
    except FileTooLarge:
        raise error(f"{name} is larger than {max_bytes // 1024} KiB") from None
    except OSError as exc:
        raise error(f"{name}: {exc.strerror}") from None
