"""Linux mount facts and calls: tmpfs mounts, unmounts, filesystem type checks.

Thin wrappers over libc (``mount(2)``, ``umount2(2)``, ``statfs(2)``) and
``/proc/self/mountinfo``; no shelling out.
"""

from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

from broker.libc import libc

TMPFS_MAGIC = 0x01021994
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MNT_DETACH = 0x2


_libc = libc


def filesystem_type(path: Path) -> int:
    """The ``f_type`` magic of the filesystem holding ``path``."""
    buf = ctypes.create_string_buffer(256)
    if _libc().statfs(os.fsencode(path), buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(path))
    return int(struct.unpack_from("l", buf.raw)[0])


def is_tmpfs(path: Path) -> bool:
    return filesystem_type(path) == TMPFS_MAGIC


def mount_tmpfs(path: Path, *, size: str, mode: int, uid: int, gid: int) -> None:
    options = f"size={size},mode={mode:o},uid={uid},gid={gid}".encode()
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    if _libc().mount(b"tmpfs", os.fsencode(path), b"tmpfs", flags, options) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(path))


def unmount(path: Path) -> None:
    """Unmount ``path``; detach lazily when it is busy."""
    if _libc().umount2(os.fsencode(path), 0) == 0:
        return
    err = ctypes.get_errno()
    if err == 16 and _libc().umount2(os.fsencode(path), MNT_DETACH) == 0:  # EBUSY
        return
    err = ctypes.get_errno()
    raise OSError(err, os.strerror(err), str(path))


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_points() -> set[str]:
    """Every mount point of this mount namespace."""
    points: set[str] = set()
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            parts = line.split(" ")
            if len(parts) > 4:
                points.add(_unescape(parts[4]))
    return points


def is_mount_point(path: Path) -> bool:
    return str(path) in mount_points()


CAP_SYS_ADMIN = 21


def effective_capabilities() -> int:
    """The ``CapEff`` bit mask of this process (0 when ``/proc`` does not say)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return 0


def can_mount() -> bool:
    """Whether this process may mount: CAP_SYS_ADMIN is in its effective set.

    Not the uid: root in an unprivileged container lacks CAP_SYS_ADMIN, and
    must then use a ``runtime_dir`` that is already a tmpfs.
    """
    return bool(effective_capabilities() >> CAP_SYS_ADMIN & 1)
