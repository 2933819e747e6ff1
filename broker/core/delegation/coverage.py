"""Whether a child manifest is covered by its parent session, and the decision it is issued on.

Covered means: the same sandbox identity; each credential covered by one of
the parent's (the one of the same name, else any of the same provider),
as the provider says (its ``Narrowing`` capability: repositories, permissions,
policies, roles, names, the AWS session policy), and never a file where the
parent's credential stays in its proxy (``inject: proxy``); each network
destination covered by one of the parent's; no TTL beyond what the parent
has left, for the session and for each credential (whose capped TTL is
also within its parent credential's remaining life and its provider's
limits). Every reason names the widening key of the child manifest
(``credentials[0].repositories[1]: ...``, ``ttl: ...``, ``network.allow[0]:
...``). The policy is not asked again: the parent's rules allowed the
parent, and the child is within it. The parent's effective operations
(``broker.egress.operations``) limit the child's proxy as they limit the
parent's, narrowed by the child's own (``operations.git.push[0]: ...``):
a child never gets a proxy that lets through what its parent's refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from broker.core.inputs.approval import Delegation
from broker.core.inputs.config import Config
from broker.core.inputs.manifest import Manifest
from broker.core.inputs.policy import CredentialDecision, Decision
from broker.core.store.interface import CredentialRecord, SessionRecord
from broker.core.store.states import CredentialState
from broker.egress.allowlist.lists import NetworkDecision
from broker.egress.operations import NO_OPERATIONS, Operations, narrow
from broker.vocab.durations import format_duration
from broker.vocab.errors import PolicyDenied
from providers.base import CredentialRequest
from providers.capabilities import Narrowing


@dataclass(frozen=True)
class Delegated:
    """A child session about to be issued: its parent, where its directory goes, the decision it is issued on."""

    parent: SessionRecord
    ancestors: tuple[str, ...]  # the topmost session first, ending with ``parent``
    session_id: str
    decision: Decision


def cover(
    config: Config,
    parent: SessionRecord,
    parent_manifest: Manifest,
    held: list[CredentialRecord],
    child: Manifest,
    now: datetime,
    parent_operations: Operations = NO_OPERATIONS,
) -> tuple[list[str], Decision | None]:
    """Why ``child`` is wider than ``parent`` (each reason naming its key), or the decision to issue it on.

    ``parent_operations`` are the parent's effective operations (its rule's, narrowed by its manifest)."""
    reasons: list[str] = []
    if (child.sandbox.uid, child.sandbox.gid) != (parent.uid, parent.gid):
        reasons.append(
            f"sandbox: uid/gid {child.sandbox.uid}/{child.sandbox.gid} is not the parent's {parent.uid}/{parent.gid}"
        )
    left = int((parent.expires_at - now).total_seconds())
    if child.ttl is not None and child.ttl > left:
        reasons.append(f"ttl: {format_duration(child.ttl)} is longer than the parent's remaining {_left(left)}")
    session_ttl = min(child.ttl or config.default_ttl, config.max_ttl, max(left, 0))
    decisions = []
    for index, request in enumerate(child.credentials):
        found, ttl = _credential(config, parent_manifest, held, child, index, request, session_ttl, now)
        reasons += found
        decisions.append(CredentialDecision(request.name, request.provider, not found, f"parent {parent.id}", ttl, ()))
    network: list[str] = []
    for index, destination in enumerate(child.network):
        if not any(entry.covers(destination) for entry in parent_manifest.network):
            network.append(f"network.allow[{index}]: {destination} is not among the parent's destinations")
    reasons += network
    operations = parent_operations
    if not (parent_operations.empty and child.operations.empty):
        try:
            operations = narrow(f"of parent {parent.id}", parent_operations, child.operations)
        except PolicyDenied as denied:  # each reason names the child's widening key
            reasons += list(denied.reasons)
    if reasons:
        return reasons, None
    return [], Decision(
        task=child.task,
        requester=parent.requester,
        allowed=True,
        session_ttl=session_ttl,
        credentials=tuple(decisions),
        network=NetworkDecision(child.network, True, f"parent {parent.id}" if child.network else None, ()),
        operations=operations if child.network else NO_OPERATIONS,
        delegation=Delegation(max(parent.delegate_depth - 1, 0)),
    )


def _credential(
    config: Config,
    parent_manifest: Manifest,
    held: list[CredentialRecord],
    child: Manifest,
    index: int,
    request: CredentialRequest,
    session_ttl: int,
    now: datetime,
) -> tuple[list[str], int | None]:
    """Why one child credential is wider than every parent credential that could cover it; else its TTL."""
    where = f"credentials[{index}]"
    provider = config.providers[request.provider]
    if request.name in child.proxied:
        return [
            f"{where}.inject: a delegated session's credentials are files; proxy injection stays the parent's"
        ], None
    if not isinstance(provider, Narrowing):
        return [f"{where}.provider: {provider.type_name} credentials cannot be delegated"], None
    same = [p for p in parent_manifest.credentials if p.provider == request.provider]
    named = [p for p in same if p.name == request.name]
    candidates = named or same
    if not candidates:
        return [f"{where}.provider: the parent session has no {request.provider} credential"], None
    first: list[str] = []
    for candidate in candidates:
        problems = [f"{where}.{reason}" for reason in provider.narrower(request, candidate)]
        if candidate.name in parent_manifest.proxied:
            problems.append(f"{where}.inject: the parent's {candidate.name} never enters the sandbox (inject: proxy)")
        record = next((r for r in held if r.name == candidate.name), None)
        if record is None or record.state != CredentialState.ACTIVE or record.expires_at is None:
            problems.append(f"{where}: the parent's credential {candidate.name} is no longer active")
        if problems:
            first = first or problems
            continue
        assert record is not None and record.expires_at is not None
        return _ttl(where, request, provider, session_ttl, int((record.expires_at - now).total_seconds()))
    return first, None


def _ttl(
    where: str, request: CredentialRequest, provider: Any, session_ttl: int, left: int
) -> tuple[list[str], int | None]:
    if request.ttl is not None and request.ttl > left:
        return [
            f"{where}.ttl: {format_duration(request.ttl)} is longer than the parent credential's"
            f" remaining {_left(left)}"
        ], None
    caps = [request.ttl or session_ttl, session_ttl, left]
    if provider.max_ttl is not None:
        caps.append(provider.max_ttl)
    ttl = min(caps)
    if ttl < provider.min_ttl:
        return [
            f"{where}.ttl: {_left(ttl)} left of the parent's, below the {format_duration(provider.min_ttl)}"
            f" minimum of {provider.type_name}"
        ], None
    return [], ttl


def _left(seconds: int) -> str:
    return format_duration(seconds) if seconds > 0 else "nothing"
