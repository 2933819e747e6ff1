"""Holding the broker's stop signals while it undoes something: a second Ctrl-C must not cut a rollback short.

``issue`` rolls back and ``exec`` revokes under ``signals_blocked``; the
signals stay pending and arrive once the block ends.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP while rolling back, so a second signal cannot cut it short."""
    signals = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
