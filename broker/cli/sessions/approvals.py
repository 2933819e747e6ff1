"""``broker approvals | approve | deny``: the approval requests waiting for a person, and that person's decision.

In direct mode the store is the caller's: the approver is the uid running
the command, checked against the request's approvers in the core
(``broker.core.approvals.deciding``), as the daemon checks its peer's.
"""

from __future__ import annotations

from broker.cli.context import Invocation, echo, print_json
from broker.cli.opening import open_broker
from broker.cli.render import approval_lines, decided_line
from broker.core.approvals import deciding
from broker.core.approvals.ticket import request_json
from broker.vocab.time import utcnow


def approvals(run: Invocation, as_json: bool) -> None:
    with open_broker(run.load_config()) as broker:
        found = [request_json(a) for a in deciding.visible(broker, sees_all=True)]
    if as_json:
        print_json(found)
        return
    for line in approval_lines(found, utcnow()):
        echo(line)


def approve(run: Invocation, request: str, digest: str, as_json: bool) -> None:
    with open_broker(run.load_config()) as broker:
        decided = request_json(deciding.approve(broker, request, digest))
    _show(decided, "approve", as_json)


def deny(run: Invocation, request: str, reason: str | None, as_json: bool) -> None:
    with open_broker(run.load_config()) as broker:
        decided = request_json(deciding.deny(broker, request, reason))
    _show(decided, "deny", as_json)


def _show(decided: dict[str, object], action: str, as_json: bool) -> None:
    if as_json:
        print_json(decided)
    else:
        echo(decided_line(decided, action))
