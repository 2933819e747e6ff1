"""Process-level protections for the broker itself: no core dumps, no ptrace by same-uid processes.

A core dump or a debugger attached to the broker would expose every secret
it handles (its own Vault token, the App private key, minted credentials).
``harden_process`` sets RLIMIT_CORE to 0 and marks the process non-dumpable
(``prctl(PR_SET_DUMPABLE, 0)``), which also stops other processes of the
same uid from attaching with ptrace or reading its memory through /proc.
"""

from __future__ import annotations

import resource

from broker.libc import libc

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


def _prctl(option: int, value: int = 0) -> int:
    return int(libc().prctl(option, value, 0, 0, 0))


def harden_process() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _prctl(PR_SET_DUMPABLE, 0)


def is_dumpable() -> bool:
    return _prctl(PR_GET_DUMPABLE) != 0
