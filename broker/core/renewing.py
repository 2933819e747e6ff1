"""``renew``: re-mint the credentials that expire before their session does.

A GitHub token lasts an hour, a task may last longer. For each credential
whose ``expires_at`` is before the session's, under the session lock:

1. the current credential is renamed ``<name>~<n>`` in the store (it stays
   there, active, until revoked, so a crash forgets nothing);
2. a new one is minted for what is left of the session, with the policy
   decided again for the stored manifest (a policy tightened since the issue
   applies; a denied renewal changes nothing);
3. its files replace the old ones atomically (a reader sees the old token or
   the new one, never half of either), ``session.json`` too;
4. the old credential is revoked.

A session with ``inject: proxy`` credentials is run by ``broker exec``,
whose proxy alone can take a new secret: ``renew`` asks that exec to renew
them now (``broker.core.running.forcing``) and answers with what it did;
with no exec of the session on this host it refuses (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.core.broker import Broker
from broker.core.credential.mint import Minting
from broker.core.credential.replacing import replace_in_files
from broker.core.inputs.manifest import Manifest, parse_manifest
from broker.core.inputs.policy import decide
from broker.core.running.documenting import refresh_document
from broker.core.running.forcing import RunningRenewal, ask_running
from broker.core.store.interface import SessionRecord
from broker.core.store.states import CredentialState, SessionState
from broker.host.sessiondir import SessionDirectory
from broker.vocab.errors import BadInput, PolicyDenied, UnknownSession
from broker.vocab.holding import holding
from broker.vocab.time import iso
from broker.vocab.tracing import span


@dataclass(frozen=True)
class Renewal:
    name: str
    old_expires_at: str
    new_expires_at: str
    old_outcome: CredentialState

    def to_json(self) -> dict[str, str]:
        return {
            "name": self.name,
            "old_expires_at": self.old_expires_at,
            "new_expires_at": self.new_expires_at,
            "old_outcome": self.old_outcome,
        }


def renew_session(broker: Broker, session_id: str) -> list[Renewal] | list[RunningRenewal]:
    _, manifest = _loaded(broker, session_id)  # a first look without the lock: a running exec holds it
    if manifest.proxied:
        return ask_running(broker, session_id, manifest.proxied)
    with holding(broker.session_lock(session_id), f"session {session_id}"):
        session, manifest = _loaded(broker, session_id)
        return _renew(broker, session, manifest)


def _loaded(broker: Broker, session_id: str) -> tuple[SessionRecord, Manifest]:
    """The active session and its stored manifest (as issued for its sandbox, whoever renews)."""
    session = broker.store.get_session(session_id)
    if session is None:
        raise UnknownSession(f"unknown session {session_id[:64]!r}")
    if session.state != SessionState.ACTIVE:
        raise BadInput(f"session {session_id} is {session.state}; only active sessions are renewed")
    if session.manifest is None or session.document is None:
        raise BadInput(f"session {session_id} was issued by an older broker and cannot be renewed")
    manifest = parse_manifest(
        str(session.manifest["text"]).encode(),
        broker.config,
        as_json=bool(session.manifest["json"]),
        identity=(session.uid, session.gid),  # the sandbox it was issued for, whoever renews
    )
    return session, manifest


def _renew(broker: Broker, session: SessionRecord, manifest: Manifest) -> list[Renewal]:
    now = broker.clock()
    remaining = int((session.expires_at - now).total_seconds())
    due = [
        c
        for c in broker.store.credentials(session.id)
        if c.state == CredentialState.ACTIVE
        and "~" not in c.name
        and c.expires_at is not None
        and c.expires_at < session.expires_at
    ]
    if not due or remaining <= 0:
        return []
    with span("policy.decide", task=manifest.task, session=session.id, requester=str(broker.requester)) as traced:
        decision = decide(broker.policy, manifest, broker.requester, broker.config)
        traced.set(decision="allowed" if decision.allowed else "denied")
    if not decision.allowed:
        raise PolicyDenied(decision.denial_message("renewal denied by policy"), decision.reasons)
    directory = SessionDirectory(broker.runtime, session.id, session.uid, session.gid)
    requests = {r.name: r for r in manifest.credentials}
    proxied = [c.name for c in due if c.name in manifest.proxied]
    if proxied:
        raise BadInput(f"credential {proxied[0]!r} has inject: proxy: its proxy cannot be given a renewed secret")
    renewals = []
    minting = Minting(broker, manifest, decision, session.id, session.expires_at, parent=session.parent)
    generation = 1 + sum(1 for c in broker.store.credentials(session.id) if "~" in c.name)
    for old in due:
        done = replace_in_files(minting, directory, requests[old.name], old, generation=generation, remaining=remaining)
        generation += 1
        assert old.expires_at is not None
        renewals.append(Renewal(old.name, iso(old.expires_at), iso(done.credential.expires_at), done.outcome))
    refresh_document(broker, session, {r.name: r.new_expires_at for r in renewals})
    return renewals
