"""Settling a request: wait for its decision, and turn every end but an approval into its error.

``settle`` waits (``broker.core.approvals.waiting``) and hands back the
approved request; still pending is exit 8 (``AwaitingApproval``), denied or
expired exit 3, collected or withdrawn exit 2 (``granted``). Issuing the
approved session is ``broker.core.issuing.resuming``'s (``issue
--resume``), or the running session's (``broker exec``).
"""

from __future__ import annotations

import threading
import time

from broker.core.approvals.deciding import expire
from broker.core.approvals.ticket import awaiting
from broker.core.approvals.waiting import wait_for_decision
from broker.core.broker import Broker
from broker.core.store.interface import ApprovalRecord
from broker.core.store.states import ApprovalState
from broker.vocab.errors import PolicyDenied, UnknownRequest
from broker.vocab.session_ids import check_session_id
from broker.vocab.time import iso


def settle(
    broker: Broker, request: str, *, wait: float | None, stopping: threading.Event | None = None
) -> ApprovalRecord:
    """The request once approved, waiting up to ``wait`` seconds (None: until it expires) for its decision."""
    approval = broker.store.get_approval(check_session_id(request, "request id"))
    if approval is None:
        raise UnknownRequest(f"unknown approval request {request[:64]!r}")
    if wait is None:
        wait = max((approval.expires_at - broker.clock()).total_seconds(), 0.0)

    def expired(found: ApprovalRecord) -> bool:
        done = expire(broker, found)
        if done:
            broker.checkpoint()
        return done

    approval = wait_for_decision(
        broker.store, approval.request, until=time.monotonic() + wait, stopping=stopping, expire=expired
    )
    return granted(approval)


def granted(approval: ApprovalRecord) -> ApprovalRecord:
    """``approval`` when it is approved and not yet collected; otherwise the error its state means."""
    request = approval.request
    if approval.state == ApprovalState.GRANTED:
        return approval
    if approval.state == ApprovalState.PENDING:
        raise awaiting(approval, still=True)
    if approval.state == ApprovalState.DENIED:
        because = f": {approval.reason}" if approval.reason else ""
        reason = f"request {request} was denied by {approval.decided_by}{because}; nothing was minted"
        raise PolicyDenied(reason, (reason,))
    if approval.state == ApprovalState.EXPIRED:
        reason = f"request {request} expired at {iso(approval.expires_at)} without being approved and collected"
        raise PolicyDenied(reason, (reason,))
    if approval.state == ApprovalState.COLLECTED:
        raise UnknownRequest(f"request {request} was collected already: its session is {request}")
    raise UnknownRequest(f"request {request} was withdrawn (its session was revoked before it was approved)")
