"""``broker approvals | approve | deny``: the approval requests waiting for a person, and that person's decision.

In direct mode the store is the caller's: the approver is the uid running
the command, checked against the request's approvers in the core
(``broker.core.approvals.deciding``), as the daemon checks its peer's.
"""

from __future__ import annotations

from broker.cli import render
from broker.cli.context import Invocation
from broker.cli.opening import open_broker
from broker.core.approvals import deciding
from broker.core.approvals.ticket import request_json


def approvals(run: Invocation, as_json: bool) -> None:
    with open_broker(run.load_config()) as broker:
        found = [request_json(a) for a in deciding.visible(broker, sees_all=True)]
    render.approvals(found, {"as_json": as_json})


def approve(run: Invocation, request: str, digest: str, as_json: bool) -> None:
    with open_broker(run.load_config()) as broker:
        decided = request_json(deciding.approve(broker, request, digest))
    render.approved(decided, {"as_json": as_json})


def deny(run: Invocation, request: str, reason: str | None, as_json: bool) -> None:
    with open_broker(run.load_config()) as broker:
        decided = request_json(deciding.deny(broker, request, reason))
    render.denied(decided, {"as_json": as_json})
