"""``revoke``: revoke every credential of a session at its provider and wipe its directory.

The directory goes first, so the sandbox loses its files even when a
provider is down. Each credential then gets one outcome (``revoked``,
``pending``, ``expired``, ``valid-until-expiry``); provider failures are
retried a few times with backoff, then left ``pending`` for ``sweep``. Every
outcome is logged and stored; a credential is never forgotten. Each
credential's own revocation is ``broker.core.credential.revoke``. A session
a running ``exec`` holds is not waited for: that process is asked (its
control socket) to refuse at once and revoke, and the report follows once
its lock is free.

A session's children (sessions delegated from it) are revoked with it, before
it, whatever ends it (``revoke``, ``sweep``, the end of its ``exec``). A
session still awaiting approval has nothing to revoke: its request is
withdrawn.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from broker.core import holders
from broker.core.approvals.deciding import withdraw
from broker.core.broker import Broker, preload_providers
from broker.core.credential.revoke import revoke_credential
from broker.core.store.interface import CredentialRecord, SessionRecord
from broker.core.store.lineage import ancestors
from broker.core.store.locks import try_lock
from broker.core.store.states import (
    ENDED_SESSION_STATES,
    SETTLED_CREDENTIAL_STATES,
    SHOWN_SESSION_STATES,
    UNSETTLED_CREDENTIAL_STATES,
    CredentialState,
    SessionState,
)
from broker.host.control import ask_to_revoke
from broker.host.sessiondir import remove_child_path, remove_session_path
from broker.vocab.errors import BrokerError, StoreError, UnknownSession
from broker.vocab.holding import Lock, holding
from broker.vocab.tracing import carried

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
    return revoke_many(broker, [session], reason=reason)[0]


def revoke_task(broker: Broker, task: str, *, requester: str | None = None) -> list[RevokeReport]:
    """Revoke every live session of ``task`` (and withdraw its requests awaiting approval); with ``requester``,
    only the ones that requester asked for."""
    found = broker.store.sessions(states=SHOWN_SESSION_STATES, task=task)
    sessions = [s for s in found if requester is None or s.requester == requester]
    if not sessions:
        raise UnknownSession(f"no live session for task {task[:64]!r}")
    return revoke_many(broker, sessions)


def revoke_many(broker: Broker, sessions: list[SessionRecord], *, reason: str = "revoke") -> list[RevokeReport]:
    """Revoke each session. A session another host holds (fleet mode) is asked of that host first; while its daemon
    listens, its answer is waited for before anything is revoked here: that daemon revokes the whole session as a
    local revoke would, over its warm connections, and the two hosts do not queue for the session's lock. What it
    has not finished by ``fleet_revoke_wait`` is revoked here as far as this host can."""
    asked = {session.id for session in sessions if holders.ask(broker, session)}
    deadline = time.monotonic() + holders.wait_budget(broker)
    answered = holders.answers(broker, asked, until=deadline) if asked else {}
    reports = [
        _revoke(broker, session, reason=reason, asked=session.id in asked, until=deadline) for session in sessions
    ]
    return [_answered(broker, report, answered[report.session]) if report.session in answered else report
            for report in reports]  # fmt: skip


def _answered(broker: Broker, report: RevokeReport, dir_removed: bool) -> RevokeReport:
    """``report`` once the holding host has finished the session: its credentials as the store has them now."""
    states = {r.name: r.state for r in broker.store.credentials(report.session)}
    credentials = tuple(replace(c, outcome=states.get(c.name, c.outcome)) for c in report.credentials)
    return replace(report, credentials=credentials, dir_removed=dir_removed)


def _revoke(broker: Broker, session: SessionRecord, *, reason: str, asked: bool, until: float) -> RevokeReport:
    lock = broker.session_lock(session.id)
    if session.exec_bound and session.state not in ENDED_SESSION_STATES:
        if try_lock(lock):
            lock.release()  # its exec is gone: revoke here
        elif holders.held_elsewhere(broker, session):  # its exec runs on the holding host, which was asked to stop it
            if not (asked and _within(lock, until)):
                return _left_to_holder(broker, session)
            lock.release()
        else:
            ask_to_revoke(broker.config.state_dir, session.id)  # none listening: wait for the lock as ever
    with holding(lock, f"session {session.id}"):
        current = broker.store.get_session(session.id)
        return revoke_locked(broker, current or session, reason=reason)


def _within(lock: Lock, until: float) -> bool:
    try:
        lock.acquire(timeout=max(0.0, until - time.monotonic()))
    except TimeoutError:
        return False
    return True


def _left_to_holder(broker: Broker, session: SessionRecord) -> RevokeReport:
    """A session an ``exec`` on another host still runs, whose daemon did not stop it: nothing revoked from here (the
    exec holds the session), everything pending until that host's next start or sweep finishes the ask."""
    records = [r for r in broker.store.credentials(session.id) if r.state != CredentialState.FAILED]
    outcomes = tuple(
        CredentialOutcome(
            r.name, r.provider, r.state if r.state in SETTLED_CREDENTIAL_STATES else CredentialState.PENDING
        )
        for r in records
    )
    return RevokeReport(session.id, session.task, outcomes, False, session.host)


def revoke_locked(broker: Broker, session: SessionRecord, *, reason: str) -> RevokeReport:
    """Revoke ``session`` (its children first); the caller holds its session lock."""
    requester = str(broker.requester)
    broker.make_room()  # a nearly full disk gives back the room kept for this (broker.audit.room)
    _revoke_children(broker, session, reason)
    already_ended = session.state in ENDED_SESSION_STATES
    if session.state == SessionState.AWAITING_APPROVAL:
        withdraw(broker, session.id)  # nothing was minted; nobody may approve or collect it any more
    if not already_ended:
        broker.store.set_session_state(session.id, SessionState.REVOKING)
    dir_removed = _remove_directory(broker, session)
    now = broker.clock()
    records = [r for r in broker.store.credentials(session.id) if r.state != CredentialState.FAILED]
    unsettled = [r for r in records if r.state in UNSETTLED_CREDENTIAL_STATES]
    # One thread per credential: providers are revoked at once, not one after another.
    # A credential still minting may need the provider's whole SDK to be found (the App JWT, say).
    finding = any(r.state == CredentialState.MINTING or not r.reference for r in unsettled)
    preload_providers(broker, {r.provider for r in unsettled}, minting=finding)
    elsewhere = holders.held_elsewhere(broker, session)
    holder = session.host if elsewhere else None
    revoke = carried(revoke_credential)
    with ThreadPoolExecutor(max_workers=max(1, len(unsettled)), thread_name_prefix="revoke") as pool:
        futures = {
            r.name: pool.submit(
                revoke, broker, session.id, session.task, r, now, reason=reason, holder=holder, parent=session.parent
            )
            for r in unsettled
        }
    outcomes = [
        CredentialOutcome(
            r.name, r.provider, _outcome(futures[r.name], session.id, r) if r.name in futures else r.state
        )
        for r in records
    ]
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
            **({"parent": session.parent} if session.parent is not None else {}),
        )
    return report


def _revoke_children(broker: Broker, session: SessionRecord, reason: str) -> None:
    """Every live child of ``session`` (and theirs), revoked before it: no child outlives its parent."""
    for child in broker.store.children(session.id):
        if child.state in ENDED_SESSION_STATES:
            continue
        with holding(broker.session_lock(child.id), f"session {child.id}"):
            current = broker.store.get_session(child.id) or child
            if current.state not in ENDED_SESSION_STATES:
                revoke_locked(broker, current, reason=f"parent {reason}")


def _outcome(future: Future[CredentialState], session_id: str, record: CredentialRecord) -> CredentialState:
    """One credential's outcome; a failure nobody foresaw leaves it pending (stored state unchanged, sweep retries)
    instead of costing the other credentials their report. A store that went away fails the command with its own
    error: nothing could be recorded as pending, and the session stays ``revoking`` for ``sweep``."""
    try:
        return future.result()
    except StoreError:
        raise
    except Exception as exc:
        LOG.warning(
            "revocation failed unexpectedly; left pending for sweep",
            extra={"broker_fields": {"session": session_id, "credential": record.name, "error": type(exc).__name__}},
        )
        return CredentialState.PENDING


def _remove_directory(broker: Broker, session: SessionRecord) -> bool:
    """Wipe the session's directory now if this host holds it; another host's waits for that host's sweep."""
    if holders.held_elsewhere(broker, session):
        return False
    try:
        if session.parent is not None:  # inside its topmost ancestor's directory
            return remove_child_path(broker.config.runtime_dir, ancestors(broker.store, session), session.id)
        return remove_session_path(broker.config.runtime_dir, session.id)
    except (OSError, BrokerError):
        return False
