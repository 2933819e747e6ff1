"""``broker session allow | disallow``: a running session's egress allow-list changed (parse, call the core, print)."""

from __future__ import annotations

from broker.cli.context import Invocation
from broker.cli.opening import open_broker
from broker.cli.render import network
from broker.core.running.allowing import change_network
from broker.vocab.session_ids import check_session_id


def _change(run: Invocation, session: str, destination: str, as_json: bool, *, allow: bool) -> None:
    check_session_id(session)
    with open_broker(run.load_config()) as broker:
        change = change_network(broker, session, destination, allow=allow).to_json()
    network(change, {"as_json": as_json})


def allow(run: Invocation, session: str, destination: str, as_json: bool) -> None:
    _change(run, session, destination, as_json, allow=True)


def disallow(run: Invocation, session: str, destination: str, as_json: bool) -> None:
    _change(run, session, destination, as_json, allow=False)
