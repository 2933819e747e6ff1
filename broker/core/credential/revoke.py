"""Revoke one credential: bounded retries, then one stored and logged outcome; settle one the broker stopped minting.

Used by every verb that ends a credential (``revoke``, ``sweep``, ``renew``,
an issue's rollback, ``withhold``): a credential is revoked, or left
``pending`` for ``sweep``, never forgotten. A credential still ``minting`` is
looked for at its provider first (``settle_minting``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from broker.core.broker import Broker
from broker.core.store.interface import CredentialRecord
from broker.core.store.states import CredentialState
from broker.vocab.errors import BrokerError, ProviderError
from broker.vocab.logs import event
from broker.vocab.secret import Secret
from broker.vocab.time import iso
from broker.vocab.tracing import span
from providers.base import Provider, RevokeOutcome, RevokeTarget
from providers.capabilities import FindsMinted

RETRY_DELAYS = (0.2, 0.6)
LOG = logging.getLogger("broker.revoke")


def revoke_credential(
    broker: Broker,
    session_id: str,
    task: str,
    record: CredentialRecord,
    now: datetime,
    *,
    reason: str,
    revoke_secret: Secret | None = None,
    best_effort: bool = False,
    holder: str | None = None,
    parent: str | None = None,
) -> CredentialState:
    """Revoke one credential with bounded retries; store and log the outcome.

    ``revoke_secret`` is one still held in memory (a credential the store may
    not know yet); kept on the keep-safe when the revocation stays pending.
    With ``best_effort`` a store or log that cannot be written does not hide
    the outcome: it is returned all the same (and said on stderr). ``holder``
    is the other host of the fleet holding the session: a credential only
    its keep-safe can revoke is left ``pending`` for it (recorded once).
    ``parent`` is the session a delegated one came from, named in its log.
    """
    provider = broker.config.providers.get(record.provider)
    requester = str(broker.requester)
    error = ""
    outcome: CredentialState
    if provider is not None and holder is not None and provider.revokes_with_kept_secret and revoke_secret is None:
        if record.state == CredentialState.PENDING:
            return CredentialState.PENDING  # left for its holder already, and said so: nothing new to record
        outcome, error = CredentialState.PENDING, f"only {holder}, which holds the session, keeps what revokes it"
    elif provider is None:
        outcome, error = CredentialState.PENDING, f"provider {record.provider!r} is no longer in the config"
    elif record.state == CredentialState.MINTING or not record.reference:
        outcome, error = settle_minting(broker, session_id, task, record, now, reason=reason)
    else:
        target = RevokeTarget(
            name=record.name,
            reference=record.reference,
            expires_at=record.expires_at,
            revoke_secret=revoke_secret if revoke_secret is not None else broker.keepsafe.get(session_id, record.name),
        )
        answer, error = _attempt(broker, provider, target, now, session_id)
        outcome = CredentialState.after(answer)
        if answer != RevokeOutcome.PENDING:
            broker.keepsafe.drop(session_id, record.name)
        elif revoke_secret is not None:
            _keep(broker, session_id, record.name, revoke_secret)
    common = {
        "session": session_id,
        "task": task,
        "requester": requester,
        "credential": record.name,
        "provider": record.provider,
        "type": record.type,
        "reference": dict(record.reference),
        "reason": reason,
        **({"parent": parent} if parent is not None else {}),  # a delegated session's
    }
    try:
        broker.store.set_credential_state(session_id, record.name, outcome)
        if outcome == CredentialState.PENDING:
            broker.log.append("credential.revoke_failed", error=error, **common)  # type: ignore[arg-type]
        else:
            broker.log.append("credential.revoked", outcome=outcome, **common)  # type: ignore[arg-type]
    except (BrokerError, OSError) as exc:
        if not best_effort:
            raise
        LOG.warning(
            "revocation outcome not recorded",
            extra={
                "broker_fields": {**common, "outcome": outcome, "fingerprint": record.fingerprint, "error": str(exc)}
            },
        )
    return outcome


def _keep(broker: Broker, session_id: str, name: str, revoke_secret: Secret) -> None:
    """Put a revocation secret on the keep-safe so sweep can retry; without it the credential waits out its life."""
    try:
        broker.keepsafe.put(broker.runtime, session_id, name, revoke_secret)
    except (BrokerError, OSError) as exc:
        LOG.warning("revocation secret not kept", extra={"broker_fields": {"credential": name, "error": str(exc)}})


def settle_minting(
    broker: Broker, session_id: str, task: str, record: CredentialRecord, now: datetime, *, reason: str
) -> tuple[CredentialState, str]:
    """A credential the broker stopped minting: did the provider mint it after all?

    Providers that can search (Vault, by token metadata) answer, AWS names the
    session from the reference planned before the call; whatever they find is
    revoked. For the others the credential stays pending until it must have
    expired: the session's end, plus the provider's fixed lifetime for
    credentials that cannot be shortened (GitHub's hour).
    """
    provider = broker.config.providers[record.provider]
    finds = provider if isinstance(provider, FindsMinted) else None
    try:
        found: list[dict[str, str]] = []
        if finds is not None:
            with span(
                "provider.find",
                provider=provider.name,
                provider_type=provider.type_name,
                credential=record.name,
                session=session_id,
            ) as traced:
                found = finds.find_minted(session_id, record.name, record.reference)
                traced.set(count=len(found))
    except ProviderError as exc:
        return CredentialState.PENDING, f"could not search the provider: {exc.message}"
    outcomes = []
    for reference in found:
        orphan = replace(record, state=CredentialState.ACTIVE, reference=reference, expires_at=None, name=record.name)
        target = RevokeTarget(name=record.name, reference=reference, expires_at=None)
        outcome, error = _attempt(broker, provider, target, now, session_id)
        outcomes.append(outcome)
        event = "credential.revoke_failed" if outcome == RevokeOutcome.PENDING else "credential.revoked"
        broker.log.append(
            event,
            session=session_id,
            task=task,
            requester=str(broker.requester),
            credential=orphan.name,
            provider=record.provider,
            type=record.type,
            reference=dict(reference),
            reason=f"{reason} (found)",
            **({"error": error} if outcome == RevokeOutcome.PENDING else {"outcome": outcome}),
        )
    if RevokeOutcome.PENDING in outcomes:
        return CredentialState.PENDING, "a credential found at the provider could not be revoked yet"
    if found:
        return CredentialState.REVOKED, ""
    if finds is not None and finds.search_is_exhaustive:
        return CredentialState.FAILED, ""  # the provider never minted it
    session = broker.store.get_session(session_id)
    settled_after = session.expires_at if session else now
    if provider.fixed_lifetime:
        settled_after += timedelta(seconds=provider.fixed_lifetime)
    if now >= settled_after:
        return CredentialState.EXPIRED, ""
    return (
        CredentialState.PENDING,
        f"the broker stopped while minting; it cannot be revoked before {iso(settled_after)}",
    )


def _attempt(
    broker: Broker, provider: Provider[Any], target: RevokeTarget, now: datetime, session_id: str
) -> tuple[RevokeOutcome, str]:
    """Revoke ``target`` with bounded retries: each call a span, and in the daemon's metrics its time and outcome."""
    error = ""
    metrics = broker.metrics
    for attempt in range(len(RETRY_DELAYS) + 1):
        started = time.monotonic()
        try:
            with span(
                "provider.revoke",
                provider=provider.name,
                provider_type=provider.type_name,
                credential=target.name,
                session=session_id,
            ) as traced:
                outcome: RevokeOutcome = provider.revoke(target, now)
                traced.set(outcome=outcome.value)
            if metrics is not None:
                metrics.revoke_seconds(provider.name, time.monotonic() - started)
                if outcome == RevokeOutcome.REVOKED:
                    metrics.revoked(provider.name)
                elif outcome == RevokeOutcome.PENDING:
                    metrics.failed(provider.name, "revoke")
            event(
                LOG,
                "revoked",
                credential=target.name,
                reference=dict(target.reference),
                outcome=outcome.value,
                ms=round((time.monotonic() - started) * 1000),
            )
            return outcome, ""
        except ProviderError as exc:
            if metrics is not None:
                metrics.revoke_seconds(provider.name, time.monotonic() - started)
            error = exc.message
            event(
                LOG,
                "revoke failed",
                credential=target.name,
                attempt=attempt + 1,
                error=error,
                ms=round((time.monotonic() - started) * 1000),
            )
            if not exc.retryable or attempt == len(RETRY_DELAYS):
                break
            time.sleep(RETRY_DELAYS[attempt])
    if metrics is not None:
        metrics.failed(provider.name, "revoke")
    return RevokeOutcome.PENDING, error
