"""Waiting for a request's decision: woken at once by a decision made in this process, else by reading the store.

Through the daemon the approver's ``approve`` and the requester's wait run in
one process, so the decision wakes the waiter at once; a decision made by
another process (direct mode, another terminal, another host) is read from
the store every ``POLL`` seconds. A request past its time is expired by
whoever looks first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from broker.core.store.interface import ApprovalRecord, Approvals
from broker.core.store.states import ApprovalState
from broker.vocab.errors import UnknownRequest

POLL = 0.2
_changed = threading.Condition()
_generation = 0


def notify() -> None:
    """A request of this process was decided: wake every waiter to read the store again."""
    global _generation
    with _changed:
        _generation += 1
        _changed.notify_all()


def wait_for_decision(
    store: Approvals,
    request: str,
    *,
    until: float,
    stopping: threading.Event | None = None,
    expire: Callable[[ApprovalRecord], bool] | None = None,
) -> ApprovalRecord:
    """The request once it is no longer ``pending``, or still pending at the monotonic time ``until`` (or once
    ``stopping`` is set). ``expire(approval)`` ends a request past its time (``deciding.expire``)."""
    while True:
        with _changed:
            seen = _generation
        approval = store.get_approval(request)
        if approval is None:
            raise UnknownRequest(f"unknown approval request {request[:64]!r}")
        if approval.state == ApprovalState.PENDING and expire is not None and expire(approval):
            continue  # past its time: read again, now expired
        left = until - time.monotonic()
        if approval.state != ApprovalState.PENDING or left <= 0 or (stopping is not None and stopping.is_set()):
            return approval
        with _changed:
            if _generation == seen:
                _changed.wait(min(POLL, left))
