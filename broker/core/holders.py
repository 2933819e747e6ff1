"""A session another host of the fleet holds: that host is asked to finish it, and the revoke waits for it.

In fleet mode only the host that holds a session (``host`` in its record)
can revoke a GitHub token of it (its keep-safe has the token, the one thing
that revokes it), wipe its tmpfs or stop an ``exec`` running it. A revoke on
any other host therefore asks that host first (``ask``: an ask recorded in
the store and announced with PostgreSQL NOTIFY) and waits up to
``fleet_revoke_wait`` (default 5 s) for the holder's answer through the
store (``answers``) before revoking what is left itself. The holder's daemon
hears the ask at once (``broker.daemon.fleet``) and finishes the session as
a local revoke would, every credential of it; a holder whose daemon is down
(or that runs none) is not waited for: the asking host revokes what it can,
the rest stays ``pending`` and the holder's next start or sweep finishes it
(``finish_asked``), since the ask stays in the store.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection

from broker.core.broker import Broker
from broker.core.store.interface import SessionRecord
from broker.vocab.session_ids import check_session_id

FIRST_POLL = 0.01
LAST_POLL = 0.1


def held_elsewhere(broker: Broker, session: SessionRecord) -> bool:
    """Whether another host of the fleet holds the session's directory (only that host touches it)."""
    return broker.store.shared and bool(session.host) and session.host != broker.config.host


def directory_gone(broker: Broker, session_id: str) -> bool:
    """Whether this host's directory of ``session_id`` is gone (wiped now, or before)."""
    return not os.path.lexists(broker.config.runtime_dir / check_session_id(session_id, "session id"))


def wait_budget(broker: Broker) -> float:
    """``fleet_revoke_wait``: the most a revoke waits for the holding hosts, in seconds."""
    store = broker.config.store
    return float(store.fleet_revoke_wait) if store is not None else 0.0


def ask(broker: Broker, session: SessionRecord) -> bool:
    """Ask the host holding ``session`` to finish revoking it; whether to wait for its answer (its daemon listens)."""
    revokes = broker.store.fleet_revokes()
    if revokes is None or not held_elsewhere(broker, session):
        return False
    return revokes.ask(session.id, session.host) and wait_budget(broker) > 0


def answers(broker: Broker, sessions: Collection[str], *, until: float | None = None) -> dict[str, bool]:
    """The holders' answers for ``sessions`` (session -> whether its directory was wiped), waiting for all of them
    until ``until`` (a ``time.monotonic()``; ``fleet_revoke_wait`` from now by default)."""
    revokes = broker.store.fleet_revokes()
    if revokes is None or not sessions:
        return {}
    deadline = until if until is not None else time.monotonic() + wait_budget(broker)
    pause = FIRST_POLL
    while True:
        found = revokes.answered(sessions)
        left = deadline - time.monotonic()
        if len(found) == len(set(sessions)) or left <= 0:
            return found
        time.sleep(min(pause, left))
        pause = min(pause * 2, LAST_POLL)


def finish_asked(broker: Broker, revoke: Callable[[str], bool]) -> list[str]:
    """Finish what other hosts asked this host to revoke and it has not yet (its daemon was down): ``revoke(session)``
    revokes one here and says whether its directory is gone. The sessions finished."""
    revokes = broker.store.fleet_revokes()
    if revokes is None:
        return []
    finished = []
    for session_id in revokes.waiting():
        record = broker.store.get_session(session_id)
        if record is None or record.host != broker.config.host:
            continue  # an ask naming no session of this host (a stale or forged row): nothing to do here
        revokes.finished(session_id, dir_removed=revoke(session_id))
        finished.append(session_id)
    return finished
