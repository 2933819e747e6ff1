"""``sweep``: finish whatever expiry, a crash or an outage left behind.

One sweep at a time (a lock in ``state_dir/locks``); sessions a live broker
is working on are skipped (their session lock is held). In order:

1. sessions left ``issuing`` by a crashed ``issue``: roll back (revoke what
   was minted, look for what a provider minted that the store never heard
   of, remove the directory);
2. sessions left ``revoking``: finish the revocation;
3. ``active`` sessions past ``expires_at``: revoke, logged ``session.expired``;
   credentials of live sessions past their own ``expires_at``: revoke; an
   exec's session whose broker is gone: revoke, then remove what its sandbox
   left (a container, which does not die with its broker as bubblewrap does,
   and the session's cgroup);
4. ended sessions with ``pending`` credentials: retry;
5. directories and tmpfs mounts under ``runtime_dir`` that belong to no live
   session, and kept revocation secrets nobody needs any more. Only what is
   provably the broker's goes: a session the store knows, or one whose
   directory proves it (see ``is_broker_session_dir``). Every other entry is
   reported as ``foreign`` and left alone, since ``runtime_dir`` may be shared
   with something the broker knows nothing about;
6. checkpoints the witness has not received yet (an outage): sent again;
7. approval requests past their time: expired (``approval.expired``); a
   delegated session whose parent has ended: revoked with it (in step 3).

Before all that, in fleet mode, the sessions of this host that other hosts
asked it to finish revoking while its daemon was down (``asked``; see
``broker.core.holders``) are revoked here: their GitHub tokens, their
tmpfs and a running ``exec`` are this host's alone.

A row of the store that fails its checks (``broker.core.store.rows``: a
session id that is no session id, a state or host no broker writes) is
skipped, and so is anything it names; the sweep goes on with every other
session, reports the row under ``malformed`` and records it once in the
issuance log (``store.malformed``, at most MAX_RECORDS a sweep).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.core import holders
from broker.core.approvals.deciding import expire_overdue
from broker.core.broker import Broker
from broker.core.credential.revoke import revoke_credential
from broker.core.revoking import RevokeReport, revoke_locked, revoke_session
from broker.core.store.interface import LIVE_SESSION_STATES, CredentialState, SessionRecord, SessionState
from broker.core.store.locks import remove_session_lock, sweep_lock, try_lock
from broker.core.store.rows import MalformedRow
from broker.host.containers.engine import remove_session_containers
from broker.host.egress_socket import EGRESS_DIR, remove_session_socket, stale_sessions
from broker.host.keepsafe import KEEP_DIR
from broker.host.limits import remove_session_cgroup
from broker.host.sessiondir import is_broker_session_dir, remove_session_path
from broker.vocab.holding import holding
from broker.vocab.session_ids import is_session_id

MAX_RECORDS = 32  # store.malformed records one sweep appends; the rest wait for the next sweeps


@dataclass
class SweepReport:
    expired: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    pending: list[dict[str, str]] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    orphans_removed: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    malformed: list[dict[str, Any]] = field(default_factory=list)
    witness_pending: int = 0
    asked: list[str] = field(default_factory=list)
    approvals_expired: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.pending

    def to_json(self) -> dict[str, Any]:
        return {
            "expired": self.expired,
            "recovered": self.recovered,
            "retried": self.retried,
            "pending": self.pending,
            "busy": self.busy,
            "orphans_removed": self.orphans_removed,
            "foreign": self.foreign,
            "malformed": self.malformed,
            "witness_pending": self.witness_pending,
            "asked": self.asked,
            "approvals_expired": self.approvals_expired,
        }


Progress = Callable[[int, int], None]


def sweep(broker: Broker, progress: Progress | None = None) -> SweepReport:
    """One sweep; ``progress(done, total)`` is called after each session looked at."""
    report = SweepReport()
    broker.make_room()  # a nearly full disk gives back the room kept for this (broker.audit.room)
    with holding(sweep_lock(broker.config.state_dir), "sweep", timeout=300):
        report.asked = holders.finish_asked(broker, lambda session: _finish_asked(broker, session))
        now = broker.clock()
        mark = broker.store.malformed.mark()
        live = broker.store.sessions(states=LIVE_SESSION_STATES, unknown_states=True)
        live_ids = {s.id for s in live}
        unsettled = sorted({c.session_id for c in broker.store.unsettled_credentials()} - live_ids)
        total = len(live) + len(unsettled)
        for done, session in enumerate(live, start=1):
            _sweep_session(broker, session, now, report)
            if progress:
                progress(done, total)
        for done, session_id in enumerate(unsettled, start=len(live) + 1):
            ended = broker.store.get_session(session_id)
            if ended is not None and ended.state not in LIVE_SESSION_STATES:
                _sweep_session(broker, ended, now, report)
            if progress:
                progress(done, total)
        _remove_orphans(broker, report)
        report.approvals_expired = expire_overdue(broker)
        _report_malformed(broker, broker.store.malformed.since(mark), report)
        witnessed = broker.witness()
        report.witness_pending = witnessed.pending if witnessed is not None else 0
    return report


def _sweep_session(broker: Broker, session: SessionRecord, now: Any, report: SweepReport) -> None:
    lock = broker.session_lock(session.id)
    if not try_lock(lock):
        report.busy.append(session.id)
        return
    try:
        current, malformed = _reread(broker, session.id)
        if malformed:
            return  # its row went bad since it was listed: skipped, and reported as malformed
        current = current or session
        if current.state == SessionState.ISSUING:
            result = revoke_locked(broker, current, reason="crash recovery")
            report.recovered.append(current.id)
        elif current.state == SessionState.REVOKING:
            result = revoke_locked(broker, current, reason="sweep")
            report.recovered.append(current.id)
        elif current.state == SessionState.ACTIVE and current.exec_bound:  # its `broker exec` is gone (lock was free)
            result = revoke_locked(broker, current, reason="exec broker gone")
            report.recovered.append(current.id)
            _remove_sandbox(current.id)
        elif current.state == SessionState.ACTIVE and current.expires_at <= now:
            result = revoke_locked(broker, current, reason="expired")
            report.expired.append(current.id)
        elif current.state == SessionState.ACTIVE and _orphaned_child(broker, current):
            result = revoke_locked(broker, current, reason="parent ended")
            report.recovered.append(current.id)
        elif current.state == SessionState.ACTIVE:
            _revoke_expired_credentials(broker, current, now)
            return
        else:
            result = revoke_locked(broker, current, reason="sweep retry")
            report.retried.append(current.id)
        _note_pending(result, report)
        if result.complete:
            remove_session_lock(broker.config.state_dir, current.id)
    finally:
        lock.release()


def _remove_sandbox(session_id: str) -> None:
    """What a killed exec's sandbox left running (bubblewrap dies with its broker; a container does not): its
    container, and its cgroup with any process in it. Only root made them."""
    if os.geteuid() == 0:
        remove_session_containers(session_id)
        remove_session_cgroup(session_id)


def _finish_asked(broker: Broker, session_id: str) -> bool:
    """Revoke a session of this host another host asked to revoke; whether its directory is gone."""
    revoke_session(broker, session_id)
    return holders.directory_gone(broker, session_id)


def _orphaned_child(broker: Broker, session: SessionRecord) -> bool:
    """A delegated session whose parent ended (or is gone) without it: a child never outlives its parent."""
    if session.parent is None:
        return False
    parent = broker.store.get_session(session.parent)
    return parent is None or parent.state not in LIVE_SESSION_STATES


def _revoke_expired_credentials(broker: Broker, session: SessionRecord, now: Any) -> None:
    """A credential may end before its session (a GitHub token cut to a shorter TTL): revoke it then."""
    for record in broker.store.credentials(session.id):
        if record.state == CredentialState.ACTIVE and record.expires_at is not None and record.expires_at <= now:
            revoke_credential(broker, session.id, session.task, record, now, reason="expired")


def _note_pending(result: RevokeReport, report: SweepReport) -> None:
    for credential in result.credentials:
        if credential.outcome == CredentialState.PENDING:
            report.pending.append({"session": result.session, "credential": credential.name})


def _remove_orphans(broker: Broker, report: SweepReport) -> None:
    runtime_dir = broker.config.runtime_dir
    try:
        names = os.listdir(runtime_dir)
    except FileNotFoundError:
        return
    live = {s.id for s in broker.store.sessions(states=LIVE_SESSION_STATES)}  # read after listing the names
    for name in sorted(names):
        if name in (KEEP_DIR, EGRESS_DIR) or name in live:
            continue
        if not is_session_id(name):
            report.foreign.append(name)
            continue
        lock = broker.session_lock(name)
        if not try_lock(lock):
            continue  # an issue is creating it right now
        try:
            _remove_orphan(broker, name, report)
        except OSError:
            pass
        finally:
            lock.release()
    egress = runtime_dir / EGRESS_DIR
    for name in stale_sessions(egress):  # a killed broker's egress socket; a running exec holds its lock
        lock = broker.session_lock(name)
        if name in live or not try_lock(lock):
            continue
        try:
            remove_session_socket(egress, name)
        finally:
            lock.release()
    pending = {(c.session_id, c.name) for c in broker.store.unsettled_credentials()}
    for session_id, name in broker.keepsafe.held():
        if (session_id, name) not in pending:
            broker.keepsafe.drop(session_id, name)


def _remove_orphan(broker: Broker, name: str, report: SweepReport) -> None:
    """Remove ``runtime_dir/name`` (its session lock held) when it is provably the broker's own."""
    runtime_dir = broker.config.runtime_dir
    known, malformed = _reread(broker, name)
    if malformed:
        return  # its row is malformed: nothing it names is touched
    if known is not None and known.state in LIVE_SESSION_STATES:
        return  # issued after the listing above
    if known is None and not is_broker_session_dir(runtime_dir, name):
        report.foreign.append(name)
        return
    if remove_session_path(runtime_dir, name):
        report.orphans_removed.append(name)


def _reread(broker: Broker, session_id: str) -> tuple[SessionRecord | None, bool]:
    """The session as the store has it now, and whether its row is there but malformed (then: None, True)."""
    mark = broker.store.malformed.mark()
    record = broker.store.get_session(session_id)
    malformed = record is None and any(row.session_id == session_id for row in broker.store.malformed.since(mark))
    return record, malformed


def _report_malformed(broker: Broker, rows: list[MalformedRow], report: SweepReport) -> None:
    """Report what this sweep skipped; record each row once (for the fleet) in the issuance log."""
    report.malformed = [row.to_json() for row in rows]
    recorded = 0
    for row in rows:
        if recorded >= MAX_RECORDS:
            break
        if broker.store.claim_report(row.digest):
            broker.log.append(
                "store.malformed", session=None, task=None, requester=str(broker.requester), **row.to_json()
            )
            recorded += 1
