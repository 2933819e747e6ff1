"""``broker revoke``: every credential of a session (or of a task's sessions) revoked, its directory wiped.

A cold path (docs/architecture.md): the store is opened and the revoked
session's providers start their handshakes first; the revocation itself is
imported while they run.
"""

from __future__ import annotations

from broker.cli.context import Invocation
from broker.cli.opening import open_broker
from broker.core.warming import warm_revocation
from broker.vocab.errors import RevokeIncomplete, UsageError
from broker.vocab.session_ids import check_session_id
from broker.vocab.tracing import annotate


def revoke(run: Invocation, session: str | None, task: str | None, as_json: bool) -> None:
    if (session is None) == (task is None):
        raise UsageError("revoke needs exactly one of --session ID or --task NAME")
    if session is not None:
        check_session_id(session)
    config = run.load_config()
    annotate(session=session, task=task)  # on the command's trace, when tracing is on
    store = warm_revocation(config, session, task)  # the handshakes overlap the imports below
    from broker.cli.render import revoke_incomplete, revoked
    from broker.core.revoking import revoke_session, revoke_task

    with open_broker(config, store) as broker:
        if session is not None:
            reports = [revoke_session(broker, session)]
        else:
            assert task is not None
            reports = revoke_task(broker, task)
    revoked(reports[0].to_json() if session is not None else [r.to_json() for r in reports], {"as_json": as_json})
    incomplete = [r.session for r in reports if not r.complete]
    if incomplete:
        raise RevokeIncomplete(revoke_incomplete(incomplete))
