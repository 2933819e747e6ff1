"""The log records of what a delegating session's socket refuses: bounded in size, and in number by its budget.

The sandbox writes the manifest, so a record of its refusal never grows
with it: a wider manifest is a ``session.denied`` record with ``parent``,
the SHA-256 of the manifest as parsed (``manifest_sha256``, canonical JSON),
its first ``MAX_LOGGED_REASONS`` widening keys (each at most
``MAX_REASON_CHARS``) and how many there were (``reasons_total``); the same
manifest refused again within a minute is counted, not logged
(``ChildBudget.log_wider``). A request refused for ``delegate_rate`` or
``delegate_total`` is a ``session.denied`` record with ``parent`` and
``limit``, the first in each minute only. None of them is signed at once:
the next child, revocation or the session's end checkpoints the log. When the
socket closes, one ``delegation.refused`` record counts every refusal by why
(``refused``) and those no record names (``unlogged``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from broker.core.broker import Broker
from broker.core.delegation.budget import ChildBudget, Ticket
from broker.core.inputs.manifest import Manifest
from broker.core.inputs.strictdata import TaskFile
from broker.vocab.errors import RateLimited

MAX_LOGGED_REASONS = 8
MAX_REASON_CHARS = 200


def admit(broker: Broker, session: str, budget: ChildBudget) -> Ticket:
    """Count a request on ``session``'s socket; ``RateLimited`` (logged, once a minute) past the budget."""
    try:
        return budget.take()
    except RateLimited as refused:
        if budget.log_limit(refused):
            record = broker.store.get_session(session)
            broker.log.append(
                "session.denied",
                session=None,
                task=record.task if record is not None else None,
                requester=str(broker.requester),
                parent=session,
                limit=refused.limit,
                reasons=[refused.message],
            )
        raise


def log_wider(broker: Broker, parent: str, manifest: Manifest, reasons: Sequence[str], budget: ChildBudget) -> None:
    """The ``session.denied`` record of a manifest wider than ``parent``: unless it was logged in the last minute."""
    digest = manifest_digest(manifest)
    if not budget.log_wider(digest):
        return
    broker.log.append(
        "session.denied",
        session=None,
        task=manifest.task,
        requester=str(broker.requester),
        parent=parent,
        manifest_sha256=digest,
        reasons=[_clipped(reason) for reason in reasons[:MAX_LOGGED_REASONS]],
        reasons_total=len(reasons),
    )


def log_refused(broker: Broker, budget: ChildBudget) -> None:
    """The socket's last record: how many requests it refused, by why, when it refused any."""
    if not budget.refused:
        return
    record = broker.store.get_session(budget.session)
    broker.log.append(
        "delegation.refused",
        session=budget.session,
        task=record.task if record is not None else None,
        requester=str(broker.requester),
        refused=dict(sorted(budget.refused.items())),
        unlogged=dict(sorted(budget.unlogged.items())),
    )


def manifest_digest(manifest: Manifest) -> str:
    """SHA-256 of the manifest as parsed, in canonical JSON: the same request however it is spaced."""
    document = TaskFile(manifest.source.encode(), manifest.source_is_json, "manifest").document()
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _clipped(reason: str) -> str:
    return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 3] + "..."
