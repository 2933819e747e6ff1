"""The session endpoints: ``POST /v1/sessions`` (issue), ``DELETE /v1/sessions/{id}`` and ``DELETE
/v1/sessions?task=NAME`` (revoke), ``GET /v1/sessions`` (status), ``POST /v1/sessions/{id}/renew`` and ``POST
/v1/sessions/{id}/network`` (a running session's allow-list).

Answers are the documents the direct command prints, for the sessions the peer may act on (its own; all of them
for root and the daemon's own uid: ``broker.daemon.access``).
"""

from __future__ import annotations

import contextlib
from typing import Any

from broker.core.inputs.manifest import parse_manifest
from broker.core.issuing import issuing
from broker.core.renewing import renew_session
from broker.core.revoking import revoke_many
from broker.core.running.allowing import change_network
from broker.core.running.forcing import RunningRenewal, outcome_error
from broker.core.status import session_status
from broker.core.store.states import SHOWN_SESSION_STATES
from broker.daemon.access import owned_session, owner_filter
from broker.daemon.call import Call, finish, incomplete
from broker.vocab.errors import BrokerError, RevokeIncomplete, UnknownSession, UsageError
from broker.vocab.session_ids import check_session_id
from broker.vocab.tracing import annotate


def issue(call: Call) -> None:
    broker, peer = call.broker, call.peer
    manifest = parse_manifest(call.request.body, broker.config, as_json=True, identity=(peer.uid, peer.gid))
    with issuing(broker, manifest) as session:
        annotate(session=session.id, task=session.task)
        # The answer leaves while the session can still be rolled back: a peer that is gone gets nothing minted.
        call.send(201, session.to_json())
    with contextlib.suppress(BrokerError):
        broker.witness()


def revoke(call: Call) -> None:
    annotate(session=call.id)
    broker = call.broker
    report = call.revoke_one(broker, owned_session(broker, call.peer, check_session_id(call.id), "revoke").id)
    call.send(200, finish(broker, report.to_json()), *incomplete([report]))


def revoke_task(call: Call) -> None:
    """Every live session of the task that the peer may act on (its own; all of them for root)."""
    broker = call.broker
    task = call.query.get("task")
    annotate(task=task)
    if not task:
        raise UsageError("revoke needs a task (DELETE /v1/sessions?task=NAME) or a session id")
    owned = owner_filter(broker, call.peer)
    found = broker.store.sessions(states=SHOWN_SESSION_STATES, task=task)
    sessions = [s.id for s in found if owned is None or owned(s)]
    if not sessions:
        raise UnknownSession(f"no live session for task {task[:64]!r}")
    held = {session: call.holds.get(session) or _gatewayed(call, session) for session in sessions}
    others = revoke_many(broker, [s for s in found if s.id in sessions and held[s.id] is None])
    by_id = {report.session: report for report in others}  # the fleet's holders asked and waited for at once
    reports = [by_id[s] if held[s] is None else call.revoke_one(broker, s) for s in sessions]
    call.send(200, finish(broker, [report.to_json() for report in reports]), *incomplete(reports))


def _gatewayed(call: Call, session: str) -> object:
    return call.gateway.get(session) if call.gateway is not None else None


def status(call: Call) -> None:
    broker = call.broker
    providers = broker.config.providers if call.query.get("budgets") == "1" else None
    found = session_status(
        broker.store,
        include_ended=call.query.get("all") == "1",
        providers=providers,
        now=broker.clock(),
        owned=owner_filter(broker, call.peer),
    )
    call.send(200, [session.to_json() for session in found])


def renew(call: Call) -> None:
    broker = call.broker
    record = owned_session(broker, call.peer, check_session_id(call.id), "renew")
    renewals = renew_session(broker, record.id)
    failed = outcome_error([r for r in renewals if isinstance(r, RunningRenewal)])
    pending = any(renewal.old_outcome == "pending" for renewal in renewals)
    code = failed.exit_code if failed is not None else RevokeIncomplete.exit_code if pending else 0
    call.send(200, finish(broker, [r.to_json() for r in renewals]), code)


def network(call: Call) -> None:
    """``session allow|disallow``: ``{"destination": "HOST:PORT", "allow": true}`` for a session the peer owns."""
    broker = call.broker
    record = owned_session(broker, call.peer, check_session_id(call.id), "change the network of")
    body: Any = call.json_body()
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("destination"), str)
        or body.get("allow") not in (True, False)
    ):
        raise UsageError('session allow|disallow needs {"destination": "HOST:PORT", "allow": true or false}')
    change = change_network(broker, record.id, body["destination"], allow=body["allow"])
    call.send(200, finish(broker, change.to_json()))
