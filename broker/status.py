"""``status``: the sessions the store knows, as JSON-able objects."""

from __future__ import annotations

from typing import Any

from broker.store import LIVE_SESSION_STATES, SessionStore
from broker.timeutil import iso


def session_status(store: SessionStore, *, include_ended: bool) -> list[dict[str, Any]]:
    states = None if include_ended else LIVE_SESSION_STATES
    result = []
    for session in store.sessions(states=states):
        result.append(
            {
                "session": session.id,
                "task": session.task,
                "state": session.state,
                "requester": session.requester,
                "created_at": iso(session.created_at),
                "expires_at": iso(session.expires_at),
                "credentials": [
                    {
                        "name": c.name,
                        "provider": c.provider,
                        "type": c.type,
                        "state": c.state,
                        "expires_at": iso(c.expires_at) if c.expires_at else None,
                    }
                    for c in store.credentials(session.id)
                ],
            }
        )
    return result
