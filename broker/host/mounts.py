"""Linux mount facts and calls: tmpfs mounts, unmounts, filesystem type checks.

Thin wrappers over libc (``mount(2)``, ``umount2(2)``, ``statfs(2)``) and
``/proc/self/mountinfo``; no shelling out.

Session tmpfs mounts ask for ``noswap`` (Linux 6.4+) so their pages never
reach a swap device; an older kernel refuses the option with EINVAL and the
mount is retried without it. The caller learns which one it got.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from broker.host.libc import libc

TMPFS_MAGIC = 0x01021994
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MNT_DETACH = 0x2
EINVAL = 22
NOSWAP = "noswap"
SYS_FSOPEN = 430  # the same number on every architecture since Linux 5.1
SYS_FSCONFIG = 431
FSCONFIG_SET_FLAG = 0
FSOPEN_CLOEXEC = 0x1


def filesystem_type(path: Path) -> int:
    """The ``f_type`` magic of the filesystem holding ``path``."""
    buf = ctypes.create_string_buffer(256)
    if libc().statfs(os.fsencode(path), buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(path))
    return int(struct.unpack_from("l", buf.raw)[0])


def is_tmpfs(path: Path) -> bool:
    return filesystem_type(path) == TMPFS_MAGIC


def mount_tmpfs(
    path: Path, *, size: str, mode: int, uid: int, gid: int, preferred: tuple[str, ...] = (NOSWAP,)
) -> tuple[str, ...]:
    """Mount a ``nosuid,nodev,noexec`` tmpfs; returns the ``preferred`` options the kernel accepted.

    Each preferred option is tried first; when the kernel refuses the mount
    with EINVAL (an option it does not know), it is mounted without them.
    """
    base = f"size={size},mode={mode:o},uid={uid},gid={gid}"
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    attempts = [preferred, ()] if preferred else [()]
    for extra in attempts:
        options = ",".join([base, *extra]).encode()
        if libc().mount(b"tmpfs", os.fsencode(path), b"tmpfs", flags, options) == 0:
            return extra
        err = ctypes.get_errno()
        if err != EINVAL or not extra:
            raise OSError(err, os.strerror(err), str(path))
    raise AssertionError("unreachable")


def tmpfs_accepts(option: str) -> bool | None:
    """Whether this kernel's tmpfs knows the flag ``option``; None when it cannot be asked.

    Asks through ``fsopen``/``fsconfig`` (Linux 5.2+, CAP_SYS_ADMIN): a
    filesystem context is configured and closed, nothing is mounted.
    """
    syscall, long = libc().syscall, ctypes.c_long
    fd = int(syscall(long(SYS_FSOPEN), ctypes.c_char_p(b"tmpfs"), long(FSOPEN_CLOEXEC)))
    if fd < 0:
        return None
    try:
        key = ctypes.c_char_p(option.encode())
        if int(syscall(long(SYS_FSCONFIG), long(fd), long(FSCONFIG_SET_FLAG), key, ctypes.c_void_p(), long(0))) == 0:
            return True
        return False if ctypes.get_errno() == EINVAL else None
    finally:
        os.close(fd)


def unmount(path: Path) -> None:
    """Unmount ``path``; detach lazily when it is busy."""
    if libc().umount2(os.fsencode(path), 0) == 0:
        return
    err = ctypes.get_errno()
    if err == 16 and libc().umount2(os.fsencode(path), MNT_DETACH) == 0:  # EBUSY
        return
    err = ctypes.get_errno()
    raise OSError(err, os.strerror(err), str(path))


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _mountinfo() -> Iterator[list[str]]:
    """The fields of each line of ``/proc/self/mountinfo`` (the one reader of it)."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            yield line.rstrip("\n").split(" ")


def mount_points() -> set[str]:
    """Every mount point of this mount namespace."""
    return {_unescape(parts[4]) for parts in _mountinfo() if len(parts) > 4}


@dataclass(frozen=True)
class MountEntry:
    """One line of ``/proc/self/mountinfo``: where, what, and with which options."""

    point: str
    fstype: str
    source: str
    options: frozenset[str]  # per mount: nosuid, nodev, noexec...
    super_options: frozenset[str]  # per filesystem: size=..., mode=...


def mount_entry(path: Path) -> MountEntry | None:
    """The topmost mount at exactly ``path``, or None when ``path`` is not a mount point."""
    found = None
    for parts in _mountinfo():
        if len(parts) < 10 or "-" not in parts[6:] or _unescape(parts[4]) != str(path):
            continue
        tail = parts[parts.index("-", 6) + 1 :]
        if len(tail) < 3:
            continue
        found = MountEntry(
            point=str(path),
            fstype=tail[0],
            source=_unescape(tail[1]),
            options=frozenset(parts[5].split(",")),
            super_options=frozenset(tail[2].split(",")),
        )
    return found


def super_options(path: Path) -> set[str]:
    """The filesystem options (``size=...``, ``noswap``) of the mount at ``path``; empty when none."""
    entry = mount_entry(path)
    return set(entry.super_options) if entry else set()


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
