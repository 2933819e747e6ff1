"""``status``: the sessions the store knows, as JSON-able objects.

With the providers given (``status --json``), each credential whose
revocation draws on a deny budget (AWS ``deny-policy``: its role's inline
policies) also carries ``deny_budget``, read once per role from the provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from broker.core.store import LIVE_SESSION_STATES, CredentialRecord, SessionStore
from broker.vocab.time import iso
from providers.base import Provider, RevokeTarget
from providers.capabilities import DenyBudget, Reserving


def session_status(
    store: SessionStore,
    *,
    include_ended: bool,
    providers: Mapping[str, Provider[Any]] | None = None,
    now: datetime | None = None,
    requester: str | None = None,
) -> list[dict[str, Any]]:
    """Every session, or with ``requester`` only the sessions that requester asked for."""
    states = None if include_ended else LIVE_SESSION_STATES
    found = [s for s in store.sessions(states=states) if requester is None or s.requester == requester]
    sessions = [(session, store.credentials(session.id)) for session in found]
    budgets: dict[tuple[str, str], DenyBudget] = {}
    if providers is not None and now is not None:
        budgets = deny_budgets(store, providers, [c for _, records in sessions for c in records], now)
    result = []
    for session, records in sessions:
        credentials = []
        for c in records:
            item: dict[str, Any] = {
                "name": c.name,
                "provider": c.provider,
                "type": c.type,
                "state": c.state,
                "expires_at": iso(c.expires_at) if c.expires_at else None,
            }
            provider = (providers or {}).get(c.provider)
            role = provider.budget_role(c.reference) if isinstance(provider, Reserving) else None
            if role is not None and (c.provider, role) in budgets:
                item["deny_budget"] = budgets[(c.provider, role)].to_json()
            credentials.append(item)
        entry = {
            "session": session.id,
            "task": session.task,
            "state": session.state,
            "requester": session.requester,
            "created_at": iso(session.created_at),
            "expires_at": iso(session.expires_at),
            "credentials": credentials,
        }
        if store.shared:
            entry["host"] = session.host  # the host holding its directory
        result.append(entry)
    return result


#: Credential states that may still work at the provider (a pending revocation, a credential that cannot be revoked).
STILL_VALID_STATES = ("active", "pending", "valid-until-expiry")


def fleet_active(store: SessionStore, providers: Mapping[str, Provider[Any]], now: datetime) -> list[dict[str, Any]]:
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
    store: SessionStore, providers: Mapping[str, Provider[Any]], records: list[CredentialRecord], now: datetime
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
