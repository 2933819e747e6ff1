"""A policy rule: what one rule of a policy file says, read strictly and compiled.

A rule names the tasks and requesters it applies to, the sandbox identities
its sessions may run as (``sandbox_uids`` and ``sandbox_gids``: single ids
and inclusive ``"A-B"`` ranges; a rule that lists none allows no session at
all), its grants (each compiled by its provider type), its network and the
operations on it (``broker.egress``), the ceiling of its sessions' resource
limits (``limits``: ``broker.core.inputs.limits``), and what a person or a child session
may do under it (``broker.core.inputs.approval``). The policy's files and
its decision are ``broker.core.inputs.policy``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.core.inputs.approval import ApprovalRule, Delegation, read_approval, read_delegation
from broker.core.inputs.config import Config
from broker.core.inputs.limits import read_limits
from broker.egress.allowlist.lists import read_destinations
from broker.egress.destinations import Destination
from broker.egress.operations import NO_OPERATIONS, Operations, check_network, read_operations
from broker.host.limits import NO_LIMITS, Limits
from broker.vocab.fields import Fields, shown
from broker.vocab.globs import any_match
from providers.base import Grant

if TYPE_CHECKING:
    from broker.core.broker import Requester

RULE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
TASK_GLOB = re.compile(r"[a-z0-9._*?-]{1,63}")
REQUESTER_GLOB = re.compile(r"(uid:[0-9]{1,10}|[A-Za-z0-9._*?-]{1,64})")
ID_RANGE = re.compile(r"([0-9]{1,10})-([0-9]{1,10})")
MAX_ID = 2**32 - 2  # (uid_t)-1 is "no change" to chown and setuid


@dataclass(frozen=True)
class IdSet:
    """The sandbox uids or gids a rule allows: single ids and inclusive ``A-B`` ranges."""

    ranges: tuple[tuple[int, int], ...]

    def __contains__(self, value: int) -> bool:
        return any(low <= value <= high for low, high in self.ranges)

    @property
    def empty(self) -> bool:
        return not self.ranges


NO_IDS = IdSet(())


def read_id_set(fields: Fields, key: str) -> IdSet:
    """``sandbox_uids``/``sandbox_gids``: integers or ``"A-B"`` ranges; absent means none."""
    value = fields.raw(key)
    if value is None:
        return NO_IDS
    if not isinstance(value, list):
        raise fields.fail(key, 'expected a list of ids or "A-B" ranges')
    if len(value) > 100:
        raise fields.fail(key, "has more than 100 items")
    ranges: list[tuple[int, int]] = []
    for index, item in enumerate(value):
        where = f"{key}[{index}]"
        if isinstance(item, int) and not isinstance(item, bool):
            low = high = item
        elif isinstance(item, str) and (match := ID_RANGE.fullmatch(item)):
            low, high = int(match.group(1)), int(match.group(2))
        else:
            raise fields.fail(where, f'expected an id or an "A-B" range, got {shown(str(item))}')
        if not 0 <= low <= high <= MAX_ID:
            raise fields.fail(where, f"{low}-{high} is not a range of ids between 0 and {MAX_ID}")
        ranges.append((low, high))
    return IdSet(tuple(ranges))


@dataclass(frozen=True)
class Rule:
    id: str
    source: str
    description: str
    tasks: tuple[str, ...]
    requesters: tuple[str, ...] | None
    max_ttl: int | None
    grants: tuple[Grant[Any], ...]
    allow_root_sandbox: bool = False
    sandbox_uids: IdSet = NO_IDS
    sandbox_gids: IdSet = NO_IDS
    network: tuple[Destination, ...] = ()
    operations: Operations = NO_OPERATIONS  # what a session may do on its hosts (``broker.egress.operations``)
    approval: ApprovalRule | None = None  # a person decides each session (broker.core.approvals)
    delegation: Delegation = field(default_factory=Delegation)  # the children its exec sessions may ask for
    limits: Limits = NO_LIMITS  # the ceiling of its sessions' sandbox.limits (broker.core.inputs.limits)

    @property
    def allows_no_sandbox(self) -> bool:
        """A rule that lists no sandbox identities allows no session at all."""
        return self.sandbox_uids.empty or self.sandbox_gids.empty

    def sandbox_reason(self, uid: int, gid: int) -> str | None:
        """Why this rule refuses the sandbox identity ``uid``/``gid``; None when it allows it."""
        if self.sandbox_uids.empty or self.sandbox_gids.empty:
            return f"rule {self.id}: lists no sandbox_uids/sandbox_gids, so it allows no session"
        if uid not in self.sandbox_uids:
            return f"rule {self.id}: sandbox uid {uid} is not in its sandbox_uids"
        if gid not in self.sandbox_gids:
            return f"rule {self.id}: sandbox gid {gid} is not in its sandbox_gids"
        return None

    def applies_to(self, task: str, requester: Requester) -> bool:
        if not any_match(self.tasks, task):
            return False
        return self.requesters is None or any(requester.matches(p) for p in self.requesters)


def compile_rule(fields: Fields, config: Config, source: str) -> Rule:
    rule_id = fields.req_string("id", pattern=RULE_ID, max_len=64)
    description = fields.string("description", required=False, max_len=1024) or ""
    tasks = fields.string_list("tasks", pattern=TASK_GLOB, max_items=100, hint="a glob on task names")
    requesters = fields.string_list(
        "requesters",
        required=False,
        pattern=REQUESTER_GLOB,
        max_items=100,
        hint="a user name glob or uid:N",
    )
    max_ttl = fields.duration("max_ttl")
    allow_root = fields.boolean("allow_root_sandbox", False)
    uids = read_id_set(fields, "sandbox_uids")
    gids = read_id_set(fields, "sandbox_gids")
    grants = tuple(_compile_grant(g, config) for g in fields.list_of_mappings("grants", max_items=100))
    network = read_destinations(fields, "network")
    operations = read_operations(fields.mapping("operations", required=False))
    check_network(fields, operations, network)
    approval = read_approval(fields)
    delegation = read_delegation(fields)
    limits = read_limits(fields.mapping("limits", required=False))
    fields.done()
    assert tasks is not None
    return Rule(
        rule_id,
        source,
        description,
        tasks,
        requesters,
        max_ttl,
        grants,
        allow_root,
        uids,
        gids,
        network,
        operations,
        approval,
        delegation,
        limits,
    )


def _compile_grant(fields: Fields, config: Config) -> Grant[Any]:
    provider = fields.req_string("provider", max_len=64)
    if provider not in config.providers:
        known = ", ".join(sorted(config.providers)) or "none configured"
        raise fields.fail("provider", f"{shown(provider)} is not a provider in the config (known: {known})")
    max_ttl = fields.duration("max_ttl")
    grant = type(config.providers[provider]).compile_grant(fields, provider=provider, max_ttl=max_ttl)
    fields.done()
    return grant
