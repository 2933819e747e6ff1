"""The approval endpoints: list, approve, deny; and the requester's wait and collect.

* ``GET /v1/approvals``: the open requests the peer may decide or asked for (root: all);
* ``POST /v1/approvals/{id}/approve`` ``{"digest": ...}``, ``POST /v1/approvals/{id}/deny`` ``{"reason": ...}``:
  decided as the peer (its uid and groups from ``SO_PEERCRED``/``SO_PEERGROUPS``);
* ``POST /v1/approvals/{id}/wait?seconds=N`` (at most ``MAX_WAIT``): the request once decided, or as it is
  after N seconds; a decision made through this daemon answers at once;
* ``POST /v1/approvals/{id}/collect``: the approved request's session is issued (201, the session document).

Waiting and collecting are the requester's (or root's), as its session is.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from broker.core.approvals.deciding import approve as decide_approve
from broker.core.approvals.deciding import deny as decide_deny
from broker.core.approvals.deciding import expire, visible
from broker.core.approvals.ticket import request_json
from broker.core.approvals.waiting import wait_for_decision
from broker.core.broker import Broker
from broker.core.issuing.resuming import resuming
from broker.daemon.access import owned_session, sees_all
from broker.daemon.call import Call
from broker.host.serving.wire import Request
from broker.vocab.errors import BadInput
from broker.vocab.session_ids import check_session_id

MAX_WAIT = 600.0


def listed(call: Call) -> None:
    call.send(200, [request_json(a) for a in visible(call.broker, sees_all=sees_all(call.peer))])


def approve(call: Call) -> None:
    request_id = check_session_id(call.id, "request id")
    digest = _field(call.request, "digest")
    if digest is None:
        raise BadInput('approve needs the request\'s digest: {"digest": SHA256}')
    call.send(200, request_json(decide_approve(call.broker, request_id, digest)))


def deny(call: Call) -> None:
    request_id = check_session_id(call.id, "request id")
    call.send(200, request_json(decide_deny(call.broker, request_id, _field(call.request, "reason"))))


def wait(call: Call) -> None:
    request_id = check_session_id(call.id, "request id")
    owned_session(call.broker, call.peer, request_id, "wait for")
    seconds = _seconds(call.query.get("seconds", "0"))
    call.send(200, request_json(_wait(call.broker, request_id, seconds, call.stopping)))


def collect(call: Call) -> None:
    request_id = check_session_id(call.id, "request id")
    owned_session(call.broker, call.peer, request_id, "collect")
    with resuming(call.broker, request_id) as session:
        call.send(201, session.to_json())  # while it can still be rolled back: a peer that is gone gets nothing
    call.broker.checkpoint()


def _wait(broker: Broker, request: str, seconds: float, stopping: threading.Event) -> Any:
    def expired(found: Any) -> bool:
        done = expire(broker, found)
        if done:
            broker.checkpoint()
        return done

    return wait_for_decision(broker.store, request, until=time.monotonic() + seconds, stopping=stopping, expire=expired)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadInput("wait: seconds is a number") from None
    if not 0 <= value <= MAX_WAIT:
        raise BadInput(f"wait: seconds is between 0 and {MAX_WAIT:.0f}")
    return value


def _field(request: Request, name: str) -> str | None:
    if not request.body:
        return None
    try:
        body = json.loads(request.body)
    except ValueError:
        raise BadInput("the request body is not JSON") from None
    value = body.get(name) if isinstance(body, dict) else None
    if value is not None and not isinstance(value, str):
        raise BadInput(f"{name}: expected a string")
    return value
