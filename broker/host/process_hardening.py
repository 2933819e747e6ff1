"""Process-level protections for the broker itself: no core dumps, no ptrace, no swapped-out secrets.

A core dump or a debugger attached to the broker would expose every secret
it handles (its own Vault token, the App private key, minted credentials).
``harden_process`` sets RLIMIT_CORE to 0 and marks the process non-dumpable
(``prctl(PR_SET_DUMPABLE, 0)``), which also stops other processes of the
same uid from attaching with ptrace or reading its memory through /proc.

``lock_memory`` keeps the process's pages out of swap
(``mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT)``: pages are locked as
they are touched, nothing is pre-faulted). Only where that cannot break a
later allocation: with CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK. Under a
finite limit every allocation beyond it would fail, so the broker then runs
unlocked and says why (``--verbose``).
"""

from __future__ import annotations

import ctypes
import os
import resource
from dataclasses import dataclass

from broker.host.libc import libc
from broker.host.mounts import effective_capabilities  # the one reader of CapEff

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3
MCL_CURRENT = 1
MCL_FUTURE = 2
MCL_ONFAULT = 4
CAP_IPC_LOCK = 14
EINVAL = 22


@dataclass(frozen=True)
class MemoryLock:
    locked: bool
    detail: str  # why not, when not locked


def _prctl(option: int, value: int = 0) -> int:
    return int(libc().prctl(option, value, 0, 0, 0))


def harden_process() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _prctl(PR_SET_DUMPABLE, 0)


def is_dumpable() -> bool:
    return _prctl(PR_GET_DUMPABLE) != 0


def _has_ipc_lock() -> bool:
    return bool(effective_capabilities() >> CAP_IPC_LOCK & 1)


def lock_memory() -> MemoryLock:
    """Lock this process's memory, present and future, where it is safe to; never raises."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft != resource.RLIM_INFINITY and not _has_ipc_lock():
        return MemoryLock(False, f"no CAP_IPC_LOCK and RLIMIT_MEMLOCK is {soft // 1024} KiB")
    flags = MCL_CURRENT | MCL_FUTURE
    if libc().mlockall(flags | MCL_ONFAULT) == 0:
        return MemoryLock(True, "")
    err = ctypes.get_errno()
    if err == EINVAL and libc().mlockall(flags) == 0:  # before Linux 4.4: no MCL_ONFAULT
        return MemoryLock(True, "")
    err = ctypes.get_errno()
    return MemoryLock(False, f"mlockall failed: {os.strerror(err)}")
