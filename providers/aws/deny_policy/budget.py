"""Room in a role's deny policy: reserved before an AssumeRole, measured for doctor and status.

A revocation that does not fit the role's 10,240 inline-policy characters
stays pending while the credentials stay valid, and an agent able to start
and end sessions could fill the policy on purpose. So before assuming a role
the provider builds the deny policy as it would stand with every live broker
session of that role revoked (live: unexpired and in the store, revoked
already or not) plus the new session, next to the role's other inline
policies; when that would not fit, the issue is denied and nothing is minted.
Entries other writers left in the policy count as they stand; ended ones are
pruned first. The check and the mint that follows hold a per-role lock (a
thread lock and, with a lock dir, a host file lock: ``providers.aws.deny_policy.locks``),
so two issues on this host cannot both take the last room. Brokers on other
hosts (with ``shared_role_writers``) are only seen through what they already
revoked. ``Reservations``, which the provider holds, does both the
reservation and the measure ``status --json`` and ``doctor`` show.

A child session (``MintContext.delegated``: its parent's sandbox asked for it
through ``broker.sock``) gets room only below ``DELEGATED_BUDGET``, three
quarters of the characters: a sandbox creating and revoking children, whose
entries stay until their credentials expire (counted like any other: revoked
or not, while unexpired), cannot take the last quarter, which is kept for the
sessions the policy issues.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from broker.vocab.errors import BrokerError, PolicyDenied
from providers.aws.clients import AwsClients
from providers.aws.deny_policy.layout import ROLE_INLINE_BUDGET, DenyEntry, DenyList, entries_for, policy_size
from providers.aws.deny_policy.locks import RoleLocks
from providers.aws.deny_policy.writes import DenyPolicyWriter
from providers.aws.names import generation_names
from providers.aws.request import AWS_MAX_TTL, AwsStsRequest
from providers.aws.roles import Roles
from providers.base import MintContext, RevokeTarget
from providers.capabilities import DenyBudget
from providers.overlap import together

#: How much later than at the check the new credentials may start (their expiry, and so their bucket, moves).
MINT_SLACK = timedelta(minutes=10)
#: What child sessions may fill of a role's inline policies: the rest is kept for the sessions the policy issues.
DELEGATED_BUDGET = ROLE_INLINE_BUDGET * 3 // 4


def role_name_of(role_arn: str) -> str:
    return role_arn.rsplit("/", 1)[-1]


def live_entries(role_arn: str, role_id: str, live: Iterable[RevokeTarget], now: datetime) -> dict[str, DenyEntry]:
    """What revoking each live credential of this role (this role id) adds, by broker session."""
    entries: dict[str, DenyEntry] = {}
    for target in live:
        ref = target.reference
        if ref.get("role_arn") != role_arn or ref.get("role_id") != role_id or target.expires_at is None:
            continue
        if target.expires_at <= now:
            continue
        for entry in entries_for(ref.get("assumed_role_id", ""), ref.get("source_identity", ""), target.expires_at):
            if entry.value and (entry.value not in entries or entries[entry.value].until < entry.until):
                entries[entry.value] = entry
    return entries


def measure(
    snapshot: tuple[int, dict[str, Any] | None], live: Iterable[DenyEntry], now: datetime
) -> tuple[int, int, DenyList]:
    """(characters the role's inline policies use now, those of its other policies, the deny list with ``live``).

    ``snapshot`` is ``DenyPolicyWriter.snapshot``: the other inline policies' size and the deny policy.
    """
    others, current = snapshot
    reserved = DenyList.parse(current).pruned(now).merged(live)
    return others + policy_size(current), others, reserved


class Reservations:
    """Room in the deny policies of the roles one provider assumes: held before minting, measured for doctor."""

    def __init__(self, clients: AwsClients, roles: Roles, locks: RoleLocks) -> None:
        self.clients = clients
        self.roles = roles
        self.locks = locks

    @contextlib.contextmanager
    def reserve(
        self,
        wanted: Sequence[tuple[AwsStsRequest, MintContext]],
        live: Callable[[], Sequence[RevokeTarget]],
        now: datetime,
    ) -> Iterator[None]:
        """Hold each wanted role's lock and check its room; PolicyDenied when a revocation would not fit."""
        by_role: dict[str, list[tuple[AwsStsRequest, MintContext]]] = {}
        for request, context in wanted:
            by_role.setdefault(request.role_name, []).append((request, context))
        with contextlib.ExitStack() as stack:
            for role_name in sorted(by_role):
                stack.enter_context(self.locks.reserving(role_name))
            stack.callback(self.roles.forget, by_role)
            known = live()  # read under the locks: an issue that held them before has stored what it minted
            for role_name in sorted(by_role):
                self._check_room(role_name, by_role[role_name], known, now)
            yield

    def _check_room(
        self,
        role_name: str,
        wanted: list[tuple[AwsStsRequest, MintContext]],
        live: Sequence[RevokeTarget],
        now: datetime,
    ) -> None:
        role_arn = wanted[0][0].role_arn
        writer = DenyPolicyWriter(self.clients, self.clients.client("iam"))
        # One round trip for three reads. GetRole buys the role id (whose live sessions count here, and
        # which names the new session in a deny entry), MaxSessionDuration and the ARN check; mint uses
        # this answer rather than asking again. The two policy reads buy the room the revocation needs.
        # The STS client is built while they are in flight, so the AssumeRole that follows finds it ready.
        role, snapshot = together(
            lambda: self.roles.read(role_name, role_arn),
            lambda: writer.snapshot(role_name),
            lambda: self.clients.client("sts"),
        )
        self.roles.remember(role_name, role)
        role_id = str(role["RoleId"])
        current = live_entries(role_arn, role_id, live, now)
        _, others, reserved = measure(snapshot, current.values(), now)
        needed = 0
        for slack in (timedelta(0), MINT_SLACK):
            new: list[DenyEntry] = []
            for request, context in wanted:
                expires = min(now + timedelta(seconds=context.ttl) + slack, context.session_expires_at)
                session_name, source_identity = generation_names(context.session_id, request.name, context.generation)
                new.extend(entries_for(f"{role_id}:{session_name}", source_identity, expires))
            needed = max(needed, others + policy_size(reserved.merged(new).document()))
        sessions = len(current)
        if any(context.delegated for _, context in wanted) and needed > DELEGATED_BUDGET:
            raise PolicyDenied(
                f"aws {self.clients.name}: role {role_name} has {sessions} live broker session(s); revoking this"
                f" child session as well would need {needed} of the {DELEGATED_BUDGET} characters of the role's"
                f" {ROLE_INLINE_BUDGET} that child sessions may fill (the rest is kept for sessions the policy"
                " issues), so it is not issued; retry once sessions expire",
                (f"role {role_name}: no room a child session may take next to {sessions} live one(s)",),
            )
        if needed > ROLE_INLINE_BUDGET:
            raise PolicyDenied(
                f"aws {self.clients.name}: role {role_name} has {sessions} live broker session(s); revoking this one"
                f" as well would need {needed} of the {ROLE_INLINE_BUDGET} characters IAM allows the role's"
                " inline policies, so it is not issued; retry once sessions expire",
                (f"role {role_name}: no room to revoke another session next to {sessions} live one(s)",),
            )

    def budgets(self, role_arns: Collection[str], live: Sequence[RevokeTarget], now: datetime) -> list[DenyBudget]:
        """One ``DenyBudget`` per role ARN; a failure to read a role is that budget's ``error``."""
        result = []
        for role_arn in sorted(role_arns):
            sessions = 0
            try:
                writer = DenyPolicyWriter(self.clients, self.clients.client("iam"))
                name = role_name_of(role_arn)
                role, snapshot = together(
                    functools.partial(self.roles.read, name, role_arn), functools.partial(writer.snapshot, name)
                )
                current = live_entries(role_arn, str(role["RoleId"]), live, now)
                sessions = len(current)
                used, others, reserved = measure(snapshot, current.values(), now)
            except BrokerError as exc:
                result.append(DenyBudget(role_arn, sessions, ROLE_INLINE_BUDGET, error=exc.message))
                continue
            total = others + policy_size(reserved.document())
            # Another session at worst opens a bucket of its own: the latest one there can be.
            another = entries_for("", "s-" + "x" * 12, now + timedelta(seconds=AWS_MAX_TTL))
            full = others + policy_size(reserved.merged(another).document()) > ROLE_INLINE_BUDGET
            result.append(DenyBudget(role_arn, sessions, ROLE_INLINE_BUDGET, used=used, reserved=total, full=full))
        return result
