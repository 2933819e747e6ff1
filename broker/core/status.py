"""``status``: the sessions the store knows, as frozen values (``SessionStatus``) with their JSON.

With the providers given (``status --json``), each credential whose
revocation draws on a deny budget (AWS ``deny-policy``: its role's inline
policies) also carries ``deny_budget``, read once per role from the provider.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from broker.core.store.interface import CredentialRecord, Credentials, Records, SessionRecord
from broker.core.store.states import SHOWN_SESSION_STATES, CredentialState, SessionState
from broker.vocab.time import iso
from providers.base import Provider, RevokeTarget
from providers.capabilities import DenyBudget, Reserving


@dataclass(frozen=True)
class CredentialStatus:
    name: str
    provider: str
    type: str
    state: CredentialState
    expires_at: datetime | None
    deny_budget: DenyBudget | None = None  # ``status --json``: the room left in its role's deny policies

    def to_json(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            "name": self.name,
            "provider": self.provider,
            "type": self.type,
            "state": self.state,
            "expires_at": iso(self.expires_at) if self.expires_at else None,
        }
        if self.deny_budget is not None:
            item["deny_budget"] = self.deny_budget.to_json()
        return item


@dataclass(frozen=True)
class SessionStatus:
    id: str
    task: str
    state: SessionState
    requester: str
    created_at: datetime
    expires_at: datetime
    credentials: tuple[CredentialStatus, ...]
    host: str | None = None  # a fleet's store: the host holding its directory
    parent: str | None = None  # a delegated session: the session it was delegated from

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "session": self.id,
            "task": self.task,
            "state": self.state,
            "requester": self.requester,
            "created_at": iso(self.created_at),
            "expires_at": iso(self.expires_at),
            "credentials": [c.to_json() for c in self.credentials],
        }
        if self.host is not None:
            entry["host"] = self.host
        if self.parent is not None:
            entry["parent"] = self.parent
        return entry


def session_status(
    store: Records,
    *,
    include_ended: bool,
    providers: Mapping[str, Provider[Any]] | None = None,
    now: datetime | None = None,
    owned: Callable[[SessionRecord], bool] | None = None,
) -> list[SessionStatus]:
    """Every session, or with ``owned`` only those it says are the caller's."""
    states = None if include_ended else SHOWN_SESSION_STATES
    found = [s for s in store.sessions(states=states) if owned is None or owned(s)]
    sessions = [(session, store.credentials(session.id)) for session in found]
    budgets: dict[tuple[str, str], DenyBudget] = {}
    if providers is not None and now is not None:
        budgets = deny_budgets(store, providers, [c for _, records in sessions for c in records], now)
    return [
        SessionStatus(
            id=session.id,
            task=session.task,
            state=session.state,
            requester=session.requester,
            created_at=session.created_at,
            expires_at=session.expires_at,
            credentials=tuple(_credential_status(c, providers or {}, budgets) for c in records),
            host=session.host if store.shared else None,
            parent=session.parent,
        )
        for session, records in sessions
    ]


def _credential_status(
    record: CredentialRecord, providers: Mapping[str, Provider[Any]], budgets: Mapping[tuple[str, str], DenyBudget]
) -> CredentialStatus:
    provider = providers.get(record.provider)
    role = provider.budget_role(record.reference) if isinstance(provider, Reserving) else None
    return CredentialStatus(
        name=record.name,
        provider=record.provider,
        type=record.type,
        state=record.state,
        expires_at=record.expires_at,
        deny_budget=budgets.get((record.provider, role)) if role is not None else None,
    )


#: Credential states that may still work at the provider (a pending revocation, a credential that cannot be revoked).
STILL_VALID_STATES = ("active", "pending", "valid-until-expiry")


def fleet_active(store: Records, providers: Mapping[str, Provider[Any]], now: datetime) -> list[dict[str, Any]]:
    """``audit active`` from the shared store: every host's credentials that still work at ``now``."""
    result = []
    sessions: dict[str, Any] = {}
    for name in sorted(providers):
        for c in store.live_credentials(name, now):
            if c.state not in STILL_VALID_STATES:
                continue
            session = sessions.get(c.session_id) or sessions.setdefault(c.session_id, store.get_session(c.session_id))
            result.append(
                {
                    "session": c.session_id,
                    "task": session.task if session else None,
                    "credential": c.name,
                    "provider": c.provider,
                    "type": c.type,
                    "scope": dict(c.scope),
                    "expires_at": iso(c.expires_at) if c.expires_at else None,
                    "host": session.host if session else None,
                }
            )
    return sorted(result, key=lambda item: (str(item["expires_at"]), item["session"], item["credential"]))


def deny_budgets(
    store: Credentials, providers: Mapping[str, Provider[Any]], records: list[CredentialRecord], now: datetime
) -> dict[tuple[str, str], DenyBudget]:
    """The deny budget of every role ``records`` draw on, by (provider, role)."""
    reserving = {name: provider for name, provider in providers.items() if isinstance(provider, Reserving)}
    roles: dict[str, set[str]] = {}
    for record in records:
        provider = reserving.get(record.provider)
        role = provider.budget_role(record.reference) if provider is not None else None
        if provider is not None and role is not None:
            roles.setdefault(provider.name, set()).add(role)
    budgets: dict[tuple[str, str], DenyBudget] = {}
    for name, wanted in sorted(roles.items()):
        live = [RevokeTarget(c.name, c.reference, c.expires_at) for c in store.live_credentials(name, now)]
        for budget in reserving[name].deny_budgets(wanted, live, now):
            budgets[(name, budget.role)] = budget
    return budgets


def live_deny_budgets(
    store: Credentials, providers: Mapping[str, Provider[Any]], now: datetime
) -> dict[str, list[DenyBudget]]:
    """The deny budget of every role the providers' unexpired credentials draw on, by provider instance."""
    records = [record for name in sorted(providers) for record in store.live_credentials(name, now)]
    budgets: dict[str, list[DenyBudget]] = {}
    for (provider, _), budget in sorted(deny_budgets(store, providers, records, now).items()):
        budgets.setdefault(provider, []).append(budget)
    return budgets
