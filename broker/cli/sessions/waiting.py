"""What ``issue`` and ``exec`` say while their session awaits a person's approval (direct mode)."""

from __future__ import annotations

from broker.cli.context import echo, print_json
from broker.cli.render import waiting_line
from broker.core.approvals.ticket import request_json
from broker.core.broker import Broker
from broker.vocab.errors import AwaitingApproval


def pending_notice(broker: Broker, pending: AwaitingApproval, wait: float | None, as_json: bool) -> None:
    """Say that the session waits for its approval: on stderr while waiting; with ``--no-wait`` also the request
    as JSON on stdout (``--json``), before the exit-8 line."""
    if wait == 0:
        if as_json:
            found = broker.store.get_approval(pending.request)
            print_json(request_json(found) if found is not None else {"request": pending.request})
        return
    echo(waiting_line(pending.message, wait), err=True)
