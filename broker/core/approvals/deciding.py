"""Deciding an approval request: approve (with the digest shown), deny, withdraw, expire; and which ones a caller sees.

The approver is the caller (``broker.requester``: the process's uid and
groups in direct mode, the peer's from ``SO_PEERCRED`` through the daemon).
It must be named by every rule that asked for an approval, must not be the
requester, and must give back the digest of exactly the request it was
shown. A refused attempt changes nothing and is a ``session.denied`` record
naming the action. Every decision is a compare-and-set in the store: two
approvers, or an approver and the expiry, never both win. In a fleet's
shared store a request is decided on the host that made it (its uids and
groups are that host's).
"""

from __future__ import annotations

from datetime import timedelta

from broker.core.approvals.digest import given_digest, same_digest
from broker.core.approvals.waiting import notify
from broker.core.broker import Broker
from broker.core.inputs.approval import may_approve
from broker.core.store.interface import ApprovalRecord
from broker.core.store.states import OPEN_APPROVAL_STATES, ApprovalState, SessionState
from broker.vocab.errors import BadInput, PolicyDenied, UnknownRequest
from broker.vocab.session_ids import check_session_id

MAX_REASON = 500


def approve(broker: Broker, request: str, digest: str) -> ApprovalRecord:
    """Approve ``request`` as the caller; ``digest`` is the one the caller was shown."""
    given = given_digest(digest)
    approval = _pending(broker, request, "approve")
    approver = broker.requester
    if approval.requester_uid is not None and approval.requester_uid == approver.uid:
        _refuse(
            broker,
            approval,
            "approve",
            f"{approver} asked for request {approval.request}: a requester never approves their own request",
        )
    if not may_approve(approval.approvers, approver.uid, approver.groups):
        _refuse(
            broker,
            approval,
            "approve",
            f"{approver} is not an approver of request {approval.request} (approvers: {_who(approval)})",
        )
    if not same_digest(given, approval.digest):
        _refuse(
            broker,
            approval,
            "approve",
            f"the digest given does not match request {approval.request}:"
            " it is not the request that was shown; look again with broker approvals",
        )
    now = broker.clock().replace(microsecond=0)
    granted = broker.store.decide_approval(
        approval.request,
        was=(ApprovalState.PENDING,),
        now=ApprovalState.GRANTED,
        at=now,
        expires_at=now + timedelta(seconds=approval.timeout),  # the requester collects it within the same time
        by=str(approver),
        by_uid=approver.uid,
    )
    if not granted:
        raise _not_open(broker, approval.request, "approve")
    broker.log.append(
        "approval.granted",
        session=approval.request,
        task=approval.task,
        requester=approval.requester,
        approver=str(approver),
        approver_uid=approver.uid,
        digest=approval.digest,
    )
    notify()  # the record is in the log: the waiting requester collects while this checkpoint is signed
    broker.checkpoint()
    return _reread(broker, approval.request)


def deny(broker: Broker, request: str, reason: str | None) -> ApprovalRecord:
    """Deny ``request`` (pending, or approved and not yet collected) as an approver, or as its requester."""
    reason = _reason(reason)
    approval = _open(broker, request, "deny")
    caller = broker.requester
    own = approval.requester_uid is not None and approval.requester_uid == caller.uid
    if not own and not may_approve(approval.approvers, caller.uid, caller.groups):
        _refuse(
            broker,
            approval,
            "deny",
            f"{caller} is not an approver of request {approval.request} (approvers: {_who(approval)})",
        )
    denied = broker.store.decide_approval(
        approval.request,
        was=OPEN_APPROVAL_STATES,
        now=ApprovalState.DENIED,
        at=broker.clock().replace(microsecond=0),
        by=str(caller),
        by_uid=caller.uid,
        reason=reason,
        session_state=SessionState.DENIED,
    )
    if not denied:
        raise _not_open(broker, approval.request, "deny")
    broker.log.append(
        "approval.denied",
        session=approval.request,
        task=approval.task,
        requester=approval.requester,
        approver=str(caller),
        approver_uid=caller.uid,
        digest=approval.digest,
        reason=reason,
    )
    notify()
    broker.checkpoint()
    return _reread(broker, approval.request)


def withdraw(broker: Broker, request: str) -> None:
    """The request's session is revoked before it was issued: nobody can approve or collect it any more."""
    broker.store.decide_approval(
        request,
        was=OPEN_APPROVAL_STATES,
        now=ApprovalState.WITHDRAWN,
        at=broker.clock().replace(microsecond=0),
        by=str(broker.requester),
        by_uid=broker.requester.uid,
    )
    notify()


def expire(broker: Broker, approval: ApprovalRecord) -> bool:
    """Expire an open request past its time (``approval.expired``); False when it was decided meanwhile."""
    now = broker.clock()
    if approval.state not in OPEN_APPROVAL_STATES or approval.expires_at > now:
        return False
    expired = broker.store.decide_approval(
        approval.request,
        was=(approval.state,),
        now=ApprovalState.EXPIRED,
        at=now,
        session_state=SessionState.EXPIRED,
    )
    if expired:
        broker.log.append(
            "approval.expired",
            session=approval.request,
            task=approval.task,
            requester=approval.requester,
            digest=approval.digest,
            was=str(approval.state),  # pending: nobody decided; granted: approved but never collected
            expires_at=approval.expires_at.isoformat().replace("+00:00", "Z"),
        )
        notify()
    return expired


def expire_overdue(broker: Broker) -> list[str]:
    """Expire every open request of this host past its time; the ids expired."""
    now = broker.clock()
    done = [
        approval.request
        for approval in broker.store.approvals(OPEN_APPROVAL_STATES)
        if _here(broker, approval) and approval.expires_at <= now and expire(broker, approval)
    ]
    if done:
        broker.checkpoint()
    return done


def visible(broker: Broker, *, sees_all: bool) -> list[ApprovalRecord]:
    """The open requests of this host the caller may decide, or asked for (every one with ``sees_all``); those
    past their time are expired on the way (one read of the store)."""
    caller, now = broker.requester, broker.clock()
    eligible: dict[tuple[tuple[str, ...], ...], bool] = {}  # the caller's groups are looked up once per approvers
    shown, expired = [], False
    for approval in broker.store.approvals(OPEN_APPROVAL_STATES):
        if not _here(broker, approval):
            continue
        if approval.expires_at <= now:
            expired = expire(broker, approval) or expired
            continue
        if approval.approvers not in eligible:
            eligible[approval.approvers] = may_approve(approval.approvers, caller.uid, caller.groups)
        if sees_all or approval.requester_uid == caller.uid or eligible[approval.approvers]:
            shown.append(approval)
    if expired:
        broker.checkpoint()
    return shown


def _open(broker: Broker, request: str, action: str) -> ApprovalRecord:
    """The request, open (pending or granted) and not past its time; exit 2 otherwise."""
    approval = broker.store.get_approval(check_session_id(request, "request id"))
    if approval is None:
        raise UnknownRequest(f"unknown approval request {request[:64]!r}")
    if not _here(broker, approval):
        raise UnknownRequest(f"request {approval.request} was made on host {approval.host}: {action} it there")
    if expire(broker, approval):
        broker.checkpoint()
        raise UnknownRequest(f"request {approval.request} expired at {approval.expires_at:%Y-%m-%dT%H:%M:%SZ}")
    if approval.state not in OPEN_APPROVAL_STATES:
        raise _not_open(broker, approval.request, action)
    return approval


def _pending(broker: Broker, request: str, action: str) -> ApprovalRecord:
    approval = _open(broker, request, action)
    if approval.state != ApprovalState.PENDING:
        raise _not_open(broker, approval.request, action)
    return approval


def _not_open(broker: Broker, request: str, action: str) -> UnknownRequest:
    current = broker.store.get_approval(request)
    state = current.state if current is not None else "gone"
    by = f" by {current.decided_by}" if current is not None and current.decided_by else ""
    return UnknownRequest(f"cannot {action} request {request}: it is {state}{by}")


def _refuse(broker: Broker, approval: ApprovalRecord, action: str, reason: str) -> None:
    caller = str(broker.requester)
    broker.log.append(
        "session.denied",
        session=approval.request,
        task=approval.task,
        requester=caller,
        action=action,
        reasons=[reason],
    )
    broker.checkpoint()
    raise PolicyDenied(reason, (reason,))


def _reread(broker: Broker, request: str) -> ApprovalRecord:
    approval = broker.store.get_approval(request)
    assert approval is not None
    return approval


def _who(approval: ApprovalRecord) -> str:
    return " and ".join(" or ".join(group) for group in approval.approvers)


def _here(broker: Broker, approval: ApprovalRecord) -> bool:
    return not broker.store.shared or approval.host == broker.config.host


def _reason(reason: str | None) -> str | None:
    if reason is None:
        return None
    text = " ".join(reason.split())
    if len(text) > MAX_REASON or not text.isprintable():
        raise BadInput(f"--reason: one line of at most {MAX_REASON} printable characters")
    return text or None
