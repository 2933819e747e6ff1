"""A child session for a delegating session's sandbox: covered by its parent, or denied naming what widens it.

The parent must be live, unexpired and allowed children (``delegate_depth``
left, from its rules' ``delegate`` and ``delegate_depth``). The child
manifest is read as the parent's sandbox identity; its credentials are
checked against the parent's (``broker.core.delegation.coverage``). A wider
request mints nothing: exit 3 with every widening key, and a bounded
``session.denied`` record naming the parent (``broker.core.delegation.records``,
once a minute per manifest). A covered one is issued as the
parent's requester, into ``<parent's directory>/children/<id>`` (seen in the
sandbox at ``<parent's mount_path>/children/<id>``), with ``parent`` in its
session document, its record and its log records; it is revoked with its
parent. A child with depth left gets a socket of its own. A session holds at
most ``MAX_LIVE_CHILDREN`` live children at once; how many it may ask for a
minute and in all is its socket's ``ChildBudget`` (``broker.core.delegation.budget``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

from broker.core.broker import Broker, Requester, new_session_id
from broker.core.delegation.budget import ChildBudget
from broker.core.delegation.coverage import Delegated, cover
from broker.core.delegation.records import log_wider
from broker.core.inputs.manifest import Manifest, parse_manifest
from broker.core.inputs.policy import Decision, decide
from broker.core.issuing import DelegationSocket, issuing
from broker.core.session_document import SessionDocument
from broker.core.store.interface import SessionRecord
from broker.core.store.lineage import ancestors
from broker.core.store.states import LIVE_SESSION_STATES, SessionState
from broker.host.sessiondir import CHILDREN
from broker.vocab.errors import BadInput, PolicyDenied, UnknownSession

MAX_SHOWN_REASONS = 1000
#: Live children a session may hold at once: a sandbox cannot have the broker mint without bound for it.
MAX_LIVE_CHILDREN = 64


def parent_session(broker: Broker, parent_id: str) -> SessionRecord:
    """The parent, live and allowed children now; exit 3 otherwise."""
    parent = broker.store.get_session(parent_id)
    if parent is None:
        raise UnknownSession(f"unknown session {parent_id[:64]!r}")
    if parent.state != SessionState.ACTIVE or parent.expires_at <= broker.clock():
        raise PolicyDenied(f"session {parent.id} is {parent.state}: it delegates nothing")
    if parent.delegate_depth < 1:
        raise PolicyDenied(f"session {parent.id} may not delegate further (its rules' delegate_depth is used up)")
    live = [c for c in broker.store.children(parent.id) if c.state in LIVE_SESSION_STATES]
    if len(live) >= MAX_LIVE_CHILDREN:
        raise PolicyDenied(f"session {parent.id} holds {len(live)} live children already; revoke one first")
    return parent


def child_manifest(broker: Broker, parent: SessionRecord, body: bytes) -> Manifest:
    """The child manifest (JSON), read as the parent's sandbox identity; its own mount path is refused."""
    manifest = parse_manifest(body, broker.config, as_json=True, identity=(parent.uid, parent.gid))
    document = json.loads(body)
    sandbox = document.get("sandbox") if isinstance(document, dict) else None
    if isinstance(sandbox, dict) and "mount_path" in sandbox:
        raise BadInput(
            f"sandbox.mount_path: a child's files are in its parent's directory ({parent.mount_path}/{CHILDREN}/<id>)"
        )
    return manifest


def check_child(broker: Broker, parent: SessionRecord, manifest: Manifest, budget: ChildBudget) -> Decision:
    """The decision to issue ``manifest`` on, as a child of ``parent``; exit 3 (logged, as ``budget`` lets it) when
    it is wider."""
    stored = parent.manifest or {}
    parent_manifest = parse_manifest(
        str(stored.get("text", "")).encode(),
        broker.config,
        as_json=bool(stored.get("json")),
        identity=(parent.uid, parent.gid),
    )
    held = broker.store.credentials(parent.id)
    # The parent's operations as its rules limit them now: the child's proxy is limited by them too.
    limits = decide(broker.policy, parent_manifest, broker.requester, broker.config)
    if not limits.allowed:
        reasons = [f"parent: session {parent.id}'s own manifest is no longer allowed by the policy"]
        decision = None
    else:
        reasons, decision = cover(
            broker.config, parent, parent_manifest, held, manifest, broker.clock(), limits.operations
        )
    if decision is not None:  # its own children count against the same budget: the tree's
        shared = dataclasses.replace(decision.delegation, rate=budget.rate, total=budget.total)
        return dataclasses.replace(decision, delegation=shared)
    log_wider(broker, parent.id, manifest, reasons, budget)  # signed with the next checkpoint, not one of its own
    raise PolicyDenied(_message(parent.id, reasons), tuple(reasons))


@contextlib.contextmanager
def delegating(
    broker: Broker, parent_id: str, body: bytes, owner: tuple[int, int] | None, budget: ChildBudget
) -> Iterator[tuple[SessionDocument, DelegationSocket]]:
    """Issue a child of ``parent_id`` for the manifest ``body`` (counted already in ``budget``); the block gets its
    document and its socket request (bound when the child may delegate further), and commits it by ending cleanly
    (as ``issuing``)."""
    parent = parent_session(broker, parent_id)
    if parent.requester_uid is not None and parent.requester_uid != broker.requester.uid:
        broker = dataclasses.replace(broker, requester=Requester.of_uid(parent.requester_uid))
    manifest = child_manifest(broker, parent, body)
    decision = check_child(broker, parent, manifest, budget)
    session_id = new_session_id()
    mount_path = PurePosixPath(parent.mount_path) / CHILDREN / session_id
    manifest = dataclasses.replace(manifest, sandbox=dataclasses.replace(manifest.sandbox, mount_path=mount_path))
    delegated = Delegated(parent, (*ancestors(broker.store, parent), parent.id), session_id, decision)
    socket = DelegationSocket(owner)
    with issuing(broker, manifest, delegated=delegated, delegation=socket) as session:
        yield session, socket


def _message(parent: str, reasons: list[str]) -> str:
    message = f"denied: wider than its parent session {parent}: "
    shown: list[str] = []
    for reason in reasons:
        if shown and len(message) + sum(len(s) + 2 for s in shown) + len(reason) > MAX_SHOWN_REASONS:
            break
        shown.append(reason)
    message += "; ".join(shown)
    if len(shown) < len(reasons):
        message += f"; and {len(reasons) - len(shown)} more (POST /v1/policy/check on the socket lists them)"
    return message


def describe_parent(parent: SessionRecord) -> dict[str, Any]:
    """What the socket says about the session it answers for."""
    return {"session": parent.id, "task": parent.task, "delegate_depth": parent.delegate_depth}
