"""``issue --resume``: the session of an approved request, issued.

Waiting for the decision is ``broker.core.approvals.settling``'s; once the
request is approved, ``resuming`` issues its session: the manifest stored with
the request, decided again for the requester who asked (the digest must come
out the same, or nothing is minted), collected once whoever asks
(``issuing``, ``approved``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING

from broker.core.approvals.deciding import expire
from broker.core.approvals.settling import granted
from broker.core.broker import Broker, Requester
from broker.core.inputs.manifest import Manifest, parse_manifest
from broker.core.issuing import issuing
from broker.core.session_document import SessionDocument
from broker.core.store.interface import ApprovalRecord
from broker.vocab.errors import UnknownRequest
from broker.vocab.session_ids import check_session_id

if TYPE_CHECKING:  # handed in by a caller running the proxy
    from broker.core.credential.proxied import Interception


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
