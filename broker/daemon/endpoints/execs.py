"""``broker exec`` through the daemon: ``POST /v1/exec`` issues the session and starts what the daemon holds for
it (``broker.daemon.holds``); ``POST /v1/sessions/{id}/hold`` answers, with the revoke report, only once that
session ended. Both belong to the connection that started the exec: when it closes, the session is revoked.
"""

from __future__ import annotations

from broker.daemon.call import Call, finish, incomplete
from broker.vocab.errors import UnknownSession


def start(call: Call) -> None:
    """The exec's session issued and held for this connection (a peer gone: revoked)."""
    call.answer(201, call.holds.start(call.broker, call.peer, call.json_body(), call.link))


def hold(call: Call) -> None:
    """Answer (the revoke report) only when the exec session ended; a holder that is gone gets nothing."""
    session = call.id
    held = call.holds.get(session) if session in call.link.sessions else None
    if held is None:
        raise UnknownSession(f"session {session[:64]!r} is not an exec session this connection holds")
    report = finish(call.broker, call.holds.hold(call.broker, held, call.link, call.stopping))
    call.answer(200, report.to_json(), *incomplete([report]))
