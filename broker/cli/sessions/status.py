"""``broker status``: live sessions (with ``--all``, ended ones too), as a table or JSON."""

from __future__ import annotations

from broker.cli.context import Invocation, echo, print_json
from broker.cli.opening import open_broker
from broker.cli.output import print_table
from broker.cli.render import STATUS_COLUMNS, status_rows
from broker.core.status import session_status
from broker.vocab.time import utcnow


def status(run: Invocation, as_json: bool, show_all: bool) -> None:
    config = run.load_config()
    with open_broker(config) as broker:
        providers = broker.config.providers if as_json else None  # --json adds each AWS role's deny budget
        found = session_status(broker.store, include_ended=show_all, providers=providers, now=broker.clock())
    sessions = [session.to_json() for session in found]
    if as_json:
        print_json(sessions)
        return
    if not sessions:
        echo("no live sessions" if not show_all else "no sessions")
        return
    print_table(STATUS_COLUMNS, status_rows(sessions, utcnow()))
