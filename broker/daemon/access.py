"""Who may act on a session through the daemon: the uid that asked for it on this host, root, and the daemon's uid.

The socket's group lets several launchers in; without this check each of
them could list, renew or revoke the others' sessions. A session belongs to
the uid that asked for it (``requester_uid``, which the daemon took from
``SO_PEERCRED`` when it issued it) on the host that issued it: a user name
is no identity across hosts (``alice`` on host B is not ``alice`` on host A)
and a uid means something only on its own host, so in fleet mode a peer owns
only the sessions of its uid that this daemon's host issued. A session
recorded without a uid (by an older broker) is root's. Root and the daemon's
own uid act on every session, and only they may sweep. A refusal is exit 3
naming the session, nothing changes, and the attempt is a ``session.denied``
record with the action that was refused.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from broker.core.broker import Broker
from broker.core.store.interface import SessionRecord
from broker.daemon.peer import Peer
from broker.vocab.errors import PolicyDenied, UnknownSession


def sees_all(peer: Peer) -> bool:
    """Root and the daemon's own uid act on every session; any other peer on its own."""
    return peer.uid in (0, os.geteuid())


def owns(broker: Broker, peer: Peer, record: SessionRecord) -> bool:
    """Whether ``peer`` asked for ``record``: its uid, on this daemon's host."""
    if record.requester_uid is None or record.requester_uid != peer.uid:
        return False
    return not broker.store.shared or record.host == broker.config.host


def owner_filter(broker: Broker, peer: Peer) -> Callable[[SessionRecord], bool] | None:
    """Which sessions ``peer`` may see, or None for all of them."""
    return None if sees_all(peer) else lambda record: owns(broker, peer, record)


def owned_session(broker: Broker, peer: Peer, session_id: str, action: str) -> SessionRecord:
    """The session ``peer`` may ``action``; an unknown session is exit 2, another requester's exit 3."""
    record = broker.store.get_session(session_id)
    if record is None:
        raise UnknownSession(f"unknown session {session_id[:64]!r}")
    if sees_all(peer) or owns(broker, peer, record):
        return record
    requester = str(peer.requester())
    reason = f"{requester} may not {action} session {record.id}: another requester's session"
    broker.log.append(
        "session.denied", session=record.id, task=record.task, requester=requester, action=action, reasons=[reason]
    )
    broker.checkpoint()
    broker.witness()
    raise PolicyDenied(reason, (reason,))


def operators_only(peer: Peer, action: str) -> None:
    """``action`` touches every requester's sessions: root and the daemon's own uid only (exit 3)."""
    if not sees_all(peer):
        raise PolicyDenied(f"{peer.requester()} may not {action}: only root may, through the daemon")
