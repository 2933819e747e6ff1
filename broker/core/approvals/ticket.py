"""An approval request: its digest, the summary an approver is shown, and opening it in the store.

The digest binds an approval to exactly one request: the SHA-256 of the
canonical JSON (sorted keys, no spaces) of the manifest as parsed, with the
sandbox identity it is issued for, and of the policy's decision (the rule,
provider, capped TTL of each credential, the session TTL, the network, who
must approve). The approver is shown the same summary and must give the
digest back; the session is issued only if deciding the stored manifest
again, when it is collected, still gives that digest.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from broker.core.approvals.digest import digest_of
from broker.core.broker import Broker
from broker.core.inputs.manifest import Manifest
from broker.core.inputs.policy import Decision
from broker.core.inputs.strictdata import TaskFile
from broker.core.store.interface import ApprovalRecord, SessionRecord
from broker.core.store.states import ApprovalState, SessionState
from broker.vocab.durations import format_duration
from broker.vocab.errors import AwaitingApproval
from broker.vocab.time import iso


def summary(manifest: Manifest, decision: Decision) -> dict[str, Any]:
    """What would be minted, as the approver sees it and the digest covers it."""
    document = TaskFile(manifest.source.encode(), manifest.source_is_json, "manifest").document()
    sandbox = manifest.sandbox
    return {
        "manifest": {
            "document": document,
            "sandbox": {"uid": sandbox.uid, "gid": sandbox.gid, "mount_path": str(sandbox.mount_path)},
        },
        "decision": decision.to_json(),
    }


def open_request(broker: Broker, manifest: Manifest, decision: Decision, session_id: str) -> ApprovalRecord:
    """The session ``awaiting-approval`` and its request, stored together and logged ``approval.requested``."""
    assert decision.approval is not None
    now = broker.clock().replace(microsecond=0)
    shown = summary(manifest, decision)
    need = decision.approval
    expires_at = now + timedelta(seconds=need.timeout)
    requester = broker.requester
    approval = ApprovalRecord(
        request=session_id,
        task=manifest.task,
        requester=str(requester),
        requester_uid=requester.uid,
        state=ApprovalState.PENDING,
        digest=digest_of(shown),
        summary=shown,
        approvers=need.approvers,
        timeout=need.timeout,
        created_at=now,
        expires_at=expires_at,
        host=broker.config.host,
    )
    session = SessionRecord(
        id=session_id,
        task=manifest.task,
        requester=str(requester),
        state=SessionState.AWAITING_APPROVAL,
        created_at=now,
        expires_at=expires_at,
        dir=str(broker.config.runtime_dir / session_id),
        mount_path=str(manifest.sandbox.mount_path),
        uid=manifest.sandbox.uid,
        gid=manifest.sandbox.gid,
        mounted=False,
        document=None,
        manifest=manifest.stored(decision.network.rule),
        host=broker.config.host,
        requester_uid=requester.uid,
        delegate_depth=decision.delegation.depth,
    )
    broker.store.create_approval(session, approval)
    broker.log.append(
        "approval.requested",
        session=session_id,
        task=manifest.task,
        requester=str(requester),
        digest=approval.digest,
        rules=[rule for rule, _ in need.rules],
        approvers=[list(group) for group in need.approvers],
        credentials=[c.to_json() for c in decision.credentials],
        expires_at=iso(expires_at),
    )
    broker.checkpoint()
    return approval


def awaiting(approval: ApprovalRecord, *, still: bool = False) -> AwaitingApproval:
    """The exit-8 error for ``approval``: the request id, its digest, who may approve, until when."""
    who = " and ".join(" or ".join(group) for group in approval.approvers)
    state = "still awaiting approval" if still else "awaiting approval"
    if approval.state == ApprovalState.GRANTED:
        state = "approved, not yet collected"
    message = (
        f"{state}: request {approval.request}, digest {approval.digest}; approvers {who}, until"
        f" {iso(approval.expires_at)}; once approved: broker issue --resume {approval.request}"
    )
    return AwaitingApproval(message, approval.request, approval.digest)


def request_json(approval: ApprovalRecord) -> dict[str, Any]:
    """A request as ``broker approvals --json`` and the daemon show it."""
    return {
        "request": approval.request,
        "state": approval.state,
        "task": approval.task,
        "requester": approval.requester,
        "requester_uid": approval.requester_uid,
        "digest": approval.digest,
        "approvers": [list(group) for group in approval.approvers],
        "timeout": format_duration(approval.timeout),
        "created_at": iso(approval.created_at),
        "expires_at": iso(approval.expires_at),
        "decided_at": iso(approval.decided_at) if approval.decided_at is not None else None,
        "decided_by": approval.decided_by,
        "reason": approval.reason,
        "summary": dict(approval.summary),
    }
