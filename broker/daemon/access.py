"""Who may act on a session through the daemon: the uid that asked for it, root, and the daemon's own uid.

The socket's group lets several launchers in; without this check each of
them could list, renew or revoke the others' sessions. A session belongs to
its ``requester`` as the issuance log names it (the peer's user name, or
``uid:N``), which the daemon took from ``SO_PEERCRED`` when it issued it.
A refusal is exit 3 naming the session, nothing changes, and the attempt is
a ``session.denied`` record with the action that was refused.
"""

from __future__ import annotations

import os

from broker.core.broker import Broker
from broker.core.store.interface import SessionRecord
from broker.daemon.peer import Peer
from broker.vocab.errors import PolicyDenied, UnknownSession


def sees_all(peer: Peer) -> bool:
    """Root and the daemon's own uid act on every session; any other peer on its own."""
    return peer.uid in (0, os.geteuid())


def owner_filter(peer: Peer) -> str | None:
    """The requester whose sessions ``peer`` may see, or None for all of them."""
    return None if sees_all(peer) else str(peer.requester())


def owned_session(broker: Broker, peer: Peer, session_id: str, action: str) -> SessionRecord:
    """The session ``peer`` may ``action``; an unknown session is exit 2, another requester's exit 3."""
    record = broker.store.get_session(session_id)
    if record is None:
        raise UnknownSession(f"unknown session {session_id[:64]!r}")
    requester = str(peer.requester())
    if sees_all(peer) or record.requester == requester:
        return record
    reason = f"{requester} may not {action} session {record.id}: another requester's session"
    broker.log.append(
        "session.denied", session=record.id, task=record.task, requester=requester, action=action, reasons=[reason]
    )
    broker.checkpoint()
    broker.witness()
    raise PolicyDenied(reason, (reason,))
