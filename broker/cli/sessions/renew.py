"""``broker renew``: credentials that end before their session re-minted, the files swapped, the old ones revoked;
a running exec's proxied credentials renewed by that exec, behind their placeholders."""

from __future__ import annotations

from broker.cli.context import Invocation
from broker.cli.opening import open_broker
from broker.cli.render import RENEW_PENDING, renewed
from broker.core.renewing import renew_session
from broker.core.running.forcing import RunningRenewal, outcome_error
from broker.vocab.errors import RevokeIncomplete
from broker.vocab.session_ids import check_session_id


def renew(run: Invocation, session: str, as_json: bool) -> None:
    check_session_id(session)
    config = run.load_config()
    with open_broker(config) as broker:
        renewals = renew_session(broker, session)
    renewed([r.to_json() for r in renewals], {"as_json": as_json})
    failed = outcome_error([r for r in renewals if isinstance(r, RunningRenewal)])
    if failed is not None:
        raise failed
    if any(r.old_outcome == "pending" for r in renewals):
        raise RevokeIncomplete(RENEW_PENDING)
