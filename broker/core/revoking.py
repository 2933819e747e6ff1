"""``revoke``: revoke every credential of a session at its provider and wipe its directory.

The directory goes first, so the sandbox loses its files even when a
provider is down. Each credential then gets one outcome (``revoked``,
``pending``, ``expired``, ``valid-until-expiry``); provider failures are
retried a few times with backoff, then left ``pending`` for ``sweep``. Every
outcome is logged and stored; a credential is never forgotten.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from broker.core.broker import Broker, preload_providers
from broker.core.states import (
    ENDED_SESSION_STATES,
    LIVE_SESSION_STATES,
    SETTLED_CREDENTIAL_STATES,
    UNSETTLED_CREDENTIAL_STATES,
    CredentialState,
    SessionState,
)
from broker.core.store import CredentialRecord, SessionRecord
from broker.host.sessiondir import remove_session_path
from broker.vocab.errors import BrokerError, ProviderError, UnknownSession
from broker.vocab.holding import holding
from broker.vocab.logs import event
from broker.vocab.secret import Secret
from broker.vocab.time import iso
from providers.base import RevokeOutcome, RevokeTarget

RETRY_DELAYS = (0.2, 0.6)
LOG = logging.getLogger("broker.revoke")


@dataclass(frozen=True)
class CredentialOutcome:
    name: str
    provider: str
    outcome: CredentialState


@dataclass(frozen=True)
class RevokeReport:
    session: str
    task: str
    credentials: tuple[CredentialOutcome, ...]
    dir_removed: bool
    dir_host: str | None = None  # another host holds the directory: it wipes it at its next sweep

    @property
    def complete(self) -> bool:
        dir_done = self.dir_removed or self.dir_host is not None
        return dir_done and all(c.outcome in SETTLED_CREDENTIAL_STATES for c in self.credentials)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "session": self.session,
            "credentials": [{"name": c.name, "provider": c.provider, "outcome": c.outcome} for c in self.credentials],
            "dir_removed": self.dir_removed,
        }
        if self.dir_host is not None:
            document["dir_host"] = self.dir_host
        return document


def revoke_session(broker: Broker, session_id: str, *, reason: str = "revoke") -> RevokeReport:
    session = broker.store.get_session(session_id)
    if session is None:
        raise UnknownSession(f"unknown session {session_id[:64]!r}")
    return _revoke(broker, session, reason=reason)


def revoke_task(broker: Broker, task: str) -> list[RevokeReport]:
    sessions = broker.store.sessions(states=LIVE_SESSION_STATES, task=task)
    if not sessions:
        raise UnknownSession(f"no live session for task {task[:64]!r}")
    return [_revoke(broker, session, reason="revoke") for session in sessions]


def _revoke(broker: Broker, session: SessionRecord, *, reason: str) -> RevokeReport:
    with holding(broker.session_lock(session.id), f"session {session.id}"):
        current = broker.store.get_session(session.id)
        return revoke_locked(broker, current or session, reason=reason)


def revoke_locked(broker: Broker, session: SessionRecord, *, reason: str) -> RevokeReport:
    """Revoke ``session``; the caller holds its session lock."""
    requester = str(broker.requester)
    already_ended = session.state in ENDED_SESSION_STATES
    if not already_ended:
        broker.store.set_session_state(session.id, SessionState.REVOKING)
    dir_removed = _remove_directory(broker, session)
    now = broker.clock()
    records = [r for r in broker.store.credentials(session.id) if r.state != CredentialState.FAILED]
    unsettled = [r for r in records if r.state in UNSETTLED_CREDENTIAL_STATES]
    # One thread per credential: providers are revoked at once, not one after another.
    preload_providers(broker, {r.provider for r in unsettled})
    with ThreadPoolExecutor(max_workers=max(1, len(unsettled)), thread_name_prefix="revoke") as pool:
        futures = {
            r.name: pool.submit(revoke_credential, broker, session.id, session.task, r, now, reason=reason)
            for r in unsettled
        }
    outcomes = [
        CredentialOutcome(
            r.name, r.provider, _outcome(futures[r.name], session.id, r) if r.name in futures else r.state
        )
        for r in records
    ]
    elsewhere = _held_elsewhere(broker, session)
    report = RevokeReport(session.id, session.task, tuple(outcomes), dir_removed, session.host if elsewhere else None)
    if report.complete and not already_ended:
        final = SessionState.EXPIRED if reason == "expired" else SessionState.REVOKED
        broker.store.set_session_state(session.id, final)
        broker.log.append(
            f"session.{final}",
            session=session.id,
            task=session.task,
            requester=requester,
            credentials=report.to_json()["credentials"],
            dir_removed=dir_removed,
        )
    return report


def _outcome(future: Future[CredentialState], session_id: str, record: CredentialRecord) -> CredentialState:
    """One credential's outcome; a failure nobody foresaw leaves it pending (stored state unchanged, sweep retries)
    instead of costing the other credentials their report."""
    try:
        return future.result()
    except Exception as exc:
        LOG.warning(
            "revocation failed unexpectedly; left pending for sweep",
            extra={"broker_fields": {"session": session_id, "credential": record.name, "error": type(exc).__name__}},
        )
        return CredentialState.PENDING


def _held_elsewhere(broker: Broker, session: SessionRecord) -> bool:
    """Whether another host of the fleet holds the session's directory (only that host touches it)."""
    return broker.store.shared and bool(session.host) and session.host != broker.config.host


def _remove_directory(broker: Broker, session: SessionRecord) -> bool:
    """Wipe the session's directory now if this host holds it; another host's waits for that host's sweep."""
    if _held_elsewhere(broker, session):
        return False
    try:
        return remove_session_path(broker.config.runtime_dir, session.id)
    except OSError:
        return False


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
) -> CredentialState:
    """Revoke one credential with bounded retries; store and log the outcome.

    ``revoke_secret`` is one still held in memory (a credential the store may
    not know yet); kept on the keep-safe when the revocation stays pending.
    With ``best_effort`` a store or log that cannot be written does not hide
    the outcome: it is returned all the same (and said on stderr).
    """
    provider = broker.config.providers.get(record.provider)
    requester = str(broker.requester)
    error = ""
    outcome: CredentialState
    if provider is None:
        outcome, error = CredentialState.PENDING, f"provider {record.provider!r} is no longer in the config"
    elif record.state == CredentialState.MINTING or not record.reference:
        outcome, error = _settle_minting(broker, session_id, task, record, now, reason=reason)
    else:
        target = RevokeTarget(
            name=record.name,
            reference=record.reference,
            expires_at=record.expires_at,
            revoke_secret=revoke_secret if revoke_secret is not None else broker.keepsafe.get(session_id, record.name),
        )
        answer, error = _attempt(provider.revoke, target, now)
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


def _settle_minting(
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
    try:
        found = provider.find_minted(session_id, record.name, record.reference)
    except ProviderError as exc:
        return CredentialState.PENDING, f"could not search the provider: {exc.message}"
    outcomes = []
    for reference in found:
        orphan = replace(record, state=CredentialState.ACTIVE, reference=reference, expires_at=None, name=record.name)
        target = RevokeTarget(name=record.name, reference=reference, expires_at=None)
        outcome, error = _attempt(provider.revoke, target, now)
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
    if provider.can_find_minted:
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


def _attempt(revoke: Any, target: RevokeTarget, now: datetime) -> tuple[RevokeOutcome, str]:
    error = ""
    for attempt in range(len(RETRY_DELAYS) + 1):
        started = time.monotonic()
        try:
            outcome: RevokeOutcome = revoke(target, now)
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
    return RevokeOutcome.PENDING, error
