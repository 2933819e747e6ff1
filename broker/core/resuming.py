"""``issue --resume``: wait for an approval request's decision, and issue its session once it is approved.

``settle`` waits (``broker.core.approvals.waiting``) and turns every end but
an approval into its error: still pending is exit 8 (``AwaitingApproval``),
denied or expired exit 3, collected or withdrawn exit 2. ``resuming``
issues the approved session: the manifest stored with the request, decided
again for the requester who asked (the digest must come out the same, or
nothing is minted), collected once whoever asks (``issuing``, ``approved``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from broker.core.approvals.deciding import expire
from broker.core.approvals.ticket import awaiting
from broker.core.approvals.waiting import wait_for_decision
from broker.core.broker import Broker, Requester
from broker.core.inputs.manifest import Manifest, parse_manifest
from broker.core.issuing import issuing
from broker.core.session_document import SessionDocument
from broker.core.store.interface import ApprovalRecord
from broker.core.store.states import ApprovalState
from broker.vocab.errors import PolicyDenied, UnknownRequest
from broker.vocab.session_ids import check_session_id
from broker.vocab.time import iso

if TYPE_CHECKING:  # handed in by a caller running the proxy
    from broker.core.credential.proxied import Interception


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


def requested_by(broker: Broker, approval: ApprovalRecord) -> Broker:
    """The broker acting for the requester who asked: the policy decides for them, as when they asked."""
    if approval.requester_uid is None or approval.requester_uid == broker.requester.uid:
        return broker
    return dataclasses.replace(broker, requester=Requester.of_uid(approval.requester_uid))


def stored_manifest(broker: Broker, approval: ApprovalRecord) -> Manifest:
    """The manifest the request was made with, parsed again (for the sandbox identity it was made for)."""
    session = broker.store.get_session(approval.request)
    stored = session.manifest if session is not None else None
    if session is None or not stored or not isinstance(stored.get("text"), str):
        raise UnknownRequest(f"request {approval.request} has no manifest in the store any more")
    data = str(stored["text"]).encode()
    return parse_manifest(data, broker.config, as_json=bool(stored.get("json")), identity=(session.uid, session.gid))


@contextlib.contextmanager
def resuming(broker: Broker, request: str, interception: Interception | None = None) -> Iterator[SessionDocument]:
    """Issue the approved request's session; the block receives its document (as ``issuing``'s)."""
    approval = broker.store.get_approval(check_session_id(request, "request id"))
    if approval is None:
        raise UnknownRequest(f"unknown approval request {request[:64]!r}")
    if expire(broker, approval):
        broker.checkpoint()
        approval = broker.store.get_approval(approval.request) or approval
    approval = granted(approval)
    acting = requested_by(broker, approval)
    manifest = stored_manifest(acting, approval)
    with issuing(acting, manifest, interception, approved=approval) as session:
        yield session
