"""Holding a cross-process lock with a deadline: the core's session locks and a provider's budget locks.

Any lock with ``acquire(timeout=)``/``release()`` whose timeout raises ``TimeoutError``
(``filelock.FileLock`` does); what cannot be taken in time is a ``StoreError`` naming ``what``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

from broker.vocab.errors import StoreError


class Lock(Protocol):
    def acquire(self, timeout: float = ...) -> object: ...

    def release(self) -> None: ...


@contextlib.contextmanager
def holding(lock: Lock, what: str, timeout: float = 60.0) -> Iterator[None]:
    try:
        lock.acquire(timeout=timeout)
    except TimeoutError:
        raise StoreError(f"{what} is locked by another broker process") from None
    try:
        yield
    finally:
        lock.release()
