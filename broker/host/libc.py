"""The C library, for the few system calls Python's standard library lacks (mount, statfs, prctl)."""

from __future__ import annotations

import ctypes
from functools import cache


@cache
def libc() -> ctypes.CDLL:
    """libc as already loaded into this process (no ``find_library``, which runs ``ldconfig``)."""
    return ctypes.CDLL(None, use_errno=True)
