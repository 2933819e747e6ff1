"""``issue``: decide, mint, inject, log; and roll everything back when any step fails.

One issue is one transaction (``broker.core.issuing.transaction``:
``Issuing``, built once from its inputs). ``with issuing(broker, manifest) as
session:`` decides first, here: the policy's decision (a denial logged and
refused), the approval it may need, the sandbox's owner; then it reserves
room to revoke what it will mint, takes the session lock and runs the
transaction, handing the caller the session document while the session can
still be rolled back: a clean exit commits it, an exception (or a signal)
inside the block revokes everything minted and fails with exit 4. The caller
writes ``--session-file`` and prints, or the daemon answers, inside the
block, so a launcher that never got the document never keeps a live session.

A decision that needs a person's approval mints nothing: the session is
stored ``awaiting-approval`` with its request (``broker.core.approvals``) and
``issuing`` raises ``AwaitingApproval`` (exit 8); once approved,
``broker.core.issuing.resuming`` issues that very session (``approved``), if
the policy still decides the same. A delegated session (``delegated``) is
issued on the coverage decision ``broker.core.delegation.delegating`` made,
into a directory inside its parent's. With ``delegation`` (a
``DelegationSocket``), a session whose rules allow children gets its socket
(``broker.sock``) in its directory before it is sealed.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from broker.core.approvals.digest import digest_of, same_digest
from broker.core.approvals.ticket import awaiting, open_request, summary
from broker.core.broker import Broker, new_session_id
from broker.core.credential.reserving import log_denial, reserved
from broker.core.inputs.approval import NO_DELEGATION, Delegation
from broker.core.inputs.manifest import Manifest
from broker.core.inputs.policy import Decision, decide
from broker.core.issuing.transaction import Issuing
from broker.core.session_document import SessionDocument
from broker.core.store.interface import ApprovalRecord
from broker.vocab.errors import BadInput, PolicyDenied
from broker.vocab.logs import event
from broker.vocab.tracing import span

if TYPE_CHECKING:  # an Interception is handed in by a caller running the proxy, which imports its machinery
    import socket

    from broker.core.credential.proxied import Interception
    from broker.core.delegation.coverage import Delegated
    from broker.host.limits import Limits

LOG = logging.getLogger("broker.issue")


def check(broker: Broker, manifest: Manifest) -> Decision:
    """The policy decision for ``manifest`` (no side effects)."""
    with span("policy.decide", task=manifest.task, requester=str(broker.requester)) as traced:
        decision = decide(broker.policy, manifest, broker.requester, broker.config)
        traced.set(decision="allowed" if decision.allowed else "denied", rule=_rules(decision))
    event(
        LOG,
        "policy decision",
        task=manifest.task,
        requester=decision.requester,
        allowed=decision.allowed,
        session_ttl=decision.session_ttl,
        credentials=[c.to_json() for c in decision.credentials],
    )
    return decision


@contextlib.contextmanager
def issuing(
    broker: Broker,
    manifest: Manifest,
    interception: Interception | None = None,
    *,
    approved: ApprovalRecord | None = None,
    delegated: Delegated | None = None,
    delegation: DelegationSocket | None = None,
    enforce: Callable[[Limits], None] | None = None,
) -> Iterator[SessionDocument]:
    """Issue a session for ``manifest``; the block receives its document and commits it by ending cleanly.

    An exception raised in the block, or a signal arriving, revokes every
    credential again (exit 4, its message naming what became of them).
    ``interception`` (the session proxy's) takes the secrets of ``inject: proxy``
    credentials and the effective operations (``broker.core.credential.proxied``).
    A decision that needs an approval raises ``AwaitingApproval`` once the
    request is stored, unless it is the ``approved`` request's own (same digest).
    ``enforce`` (an exec's sandbox) refuses limits its host cannot enforce, before anything is minted.
    """
    _require_proxy(manifest, interception)
    broker.ready_to_issue()  # room on the log's disk, and a log that takes records, before anything is decided
    decision = delegated.decision if delegated is not None else check(broker, manifest)
    if not decision.allowed:
        log_denial(broker, manifest, decision, decision.reasons)
        raise PolicyDenied(decision.denial_message(), decision.reasons)
    if interception is not None:
        interception.limit(decision)
    _check_sandbox_owner(manifest)
    if enforce is not None:
        enforce(decision.limits)
    if approved is not None:
        _still_as_approved(broker, manifest, decision, approved)
    elif decision.approval is not None and delegated is None:
        raise awaiting(open_request(broker, manifest, decision, new_session_id()))
    transaction = Issuing(broker, manifest, decision, interception, approved, delegated, delegation)
    with reserved(transaction, transaction.contexts, transaction.now) as reservation:
        lock = broker.session_lock(transaction.session_id)
        lock.acquire()  # held until the session is complete or rolled back: sweep leaves it alone
        try:
            transaction.begin()
            try:
                yield transaction.run(reservation)
            except BaseException as exc:
                transaction.abort(exc)
        finally:
            lock.release()


def issue(
    broker: Broker,
    manifest: Manifest,
    interception: Interception | None = None,
    *,
    approved: ApprovalRecord | None = None,
    delegation: DelegationSocket | None = None,
    enforce: Callable[[Limits], None] | None = None,
) -> SessionDocument:
    """Issue and commit at once, for a caller with nothing to deliver while the session can be rolled back."""
    with issuing(broker, manifest, interception, approved=approved, delegation=delegation, enforce=enforce) as session:
        return session


def _still_as_approved(broker: Broker, manifest: Manifest, decision: Decision, approved: ApprovalRecord) -> None:
    """The approval binds to its digest: deciding the stored manifest now must give the same one."""
    if not same_digest(digest_of(summary(manifest, decision)), approved.digest):
        reason = (
            f"request {approved.request} was approved, but the policy no longer decides it as it was approved"
            " (the digest differs); nothing was minted: ask again"
        )
        log_denial(broker, manifest, decision, (reason,))
        raise PolicyDenied(reason, (reason,))


class DelegationSocket:
    """What ``issuing`` is asked for the session's ``broker.sock``, and what it hands back.

    ``broker exec`` (its running session, direct or held by the daemon) and a
    delegating socket (for a child that may delegate further) make one and
    give it to ``issuing``. When the session's rules allow children,
    ``issuing`` binds the socket in the session directory before the
    directory is sealed, owned by ``owner``, and says how many children the
    rules allow (``limits``: ``delegate_rate`` a minute and ``delegate_total``
    in all, the smallest of its rules'); the caller serves it
    (``broker.core.running.session_socket``).
    """

    def __init__(self, owner: tuple[int, int] | None) -> None:
        self.owner = owner
        self.listener: socket.socket | None = None
        self.limits: Delegation = NO_DELEGATION


def _rules(decision: Decision) -> str | None:
    """The rules that allowed the credentials (an id for a span), None when none did."""
    rules = sorted({c.rule for c in decision.credentials if c.rule})
    return ",".join(rules) if rules else None


def _check_sandbox_owner(manifest: Manifest) -> None:
    if os.geteuid() != 0 and (manifest.sandbox.uid, manifest.sandbox.gid) != (os.getuid(), os.getgid()):
        raise BadInput(
            f"sandbox.uid/gid {manifest.sandbox.uid}/{manifest.sandbox.gid}: only root can issue files"
            " owned by another user"
        )


def _require_proxy(manifest: Manifest, interception: Interception | None) -> None:
    if manifest.proxied and interception is None:
        raise BadInput(
            f"credential {manifest.proxied[0]!r} has inject: proxy: only broker exec --network allowlist runs"
            " the proxy that puts it in"
        )
