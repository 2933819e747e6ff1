"""``broker status``: live sessions (with ``--all``, ended ones too), as a table or JSON."""

from __future__ import annotations

from broker.cli.context import Invocation
from broker.cli.opening import open_broker
from broker.cli.render import status as show_status
from broker.core.status import session_status


def status(run: Invocation, as_json: bool, show_all: bool) -> None:
    config = run.load_config()
    with open_broker(config) as broker:
        providers = broker.config.providers if as_json else None  # --json adds each AWS role's deny budget
        found = session_status(broker.store, include_ended=show_all, providers=providers, now=broker.clock())
    show_status([session.to_json() for session in found], {"as_json": as_json, "show_all": show_all})
