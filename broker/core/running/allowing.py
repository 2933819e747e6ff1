"""``session allow|disallow``: a running session's egress allow-list changed without restarting it.

An agent finds mid-task that it needs one more host (a package mirror, an
API), or an operator wants one taken away now. ``allow`` is checked against
the policy like an issue: the session's stored manifest, with the
destination added to its ``network.allow``, is decided again for the caller
(exit 3 when a rule's ``network`` does not cover it, nothing changed).
``disallow`` narrows, so it needs no rule. Either is applied to the running
proxy through the exec's control socket (``broker.host.control``: the exec
holds the session lock for as long as its command runs, so nothing here
waits for it), and only once the proxy has it is it logged
(``session.allowed``, ``session.disallowed``, naming the destination): a
connection opened after this returns is decided on the new list. A session
with no running proxy on this host is refused (exit 2): there is nothing to
change, and nothing is logged.

Neither changes the session's stored manifest: a child session is covered by
its parent's manifest as issued (``broker.core.delegation.coverage``), so a
destination allowed later is never a child's, and a child itself, which runs
behind its parent's proxy, is refused (exit 2: change its parent's). An
allow under a rule that asks for an approval is refused (exit 3): the
approval was given for the manifest as it was, and a wider one needs a new
session and a new approval.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from broker.core.broker import Broker
from broker.core.inputs.manifest import parse_manifest
from broker.core.inputs.policy import decide
from broker.core.store.states import SessionState
from broker.egress.destinations import DestinationError, parse_destination
from broker.host.control import ask_network
from broker.vocab.errors import BadInput, PolicyDenied, UnknownSession
from broker.vocab.session_ids import check_session_id


@dataclass(frozen=True)
class NetworkChange:
    session: str
    destination: str
    allowed: bool

    def to_json(self) -> dict[str, object]:
        return {"session": self.session, "destination": self.destination, "allowed": self.allowed}


def change_network(broker: Broker, session_id: str, text: str, *, allow: bool) -> NetworkChange:
    """Allow or disallow ``text`` (``HOST:PORT``) for the running session ``session_id``; what was changed."""
    check_session_id(session_id)
    try:
        destination = parse_destination(text)
    except DestinationError as exc:
        raise BadInput(f"destination: {exc}") from None
    session = broker.store.get_session(session_id)
    if session is None:
        raise UnknownSession(f"unknown session {session_id!r}")
    if session.state != SessionState.ACTIVE or session.expires_at <= broker.clock():
        raise BadInput(f"session {session_id} is not active; only a running session's network changes")
    if session.parent is not None:
        raise BadInput(
            f"session {session_id} is a child of {session.parent}: it runs behind its parent's proxy,"
            " whose allow-list is the one to change"
        )
    if session.manifest is None:
        raise BadInput(f"session {session_id} was issued by an older broker: its manifest is not stored")
    manifest = parse_manifest(
        str(session.manifest["text"]).encode(), broker.config, as_json=bool(session.manifest["json"])
    )
    if allow:
        wider = replace(manifest, network=(*manifest.network, destination))
        decision = decide(broker.policy, wider, broker.requester, broker.config)
        if not decision.allowed:
            raise PolicyDenied(decision.denial_message(f"allowing {destination} denied by policy"), decision.reasons)
        if decision.approval is not None:
            rules = ", ".join(rule for rule, _ in decision.approval.rules)
            raise PolicyDenied(
                f"allowing {destination} denied: rule {rules} asks for an approval of the manifest as issued;"
                " issue a new session with it in network.allow"
            )
    applied = ask_network(broker.config.state_dir, session_id, allow, str(destination))
    if not applied:
        raise BadInput(
            f"session {session_id} runs no egress proxy on this host"
            " (only broker exec --network allowlist runs one while its command runs)"
        )
    broker.log.append(
        "session.allowed" if allow else "session.disallowed",
        session=session_id,
        task=session.task,
        requester=str(broker.requester),
        destination=str(destination),
    )
    broker.checkpoint()
    return NetworkChange(session_id, str(destination), allow)
