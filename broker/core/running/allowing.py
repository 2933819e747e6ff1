"""``session allow|disallow``: a running session's egress allow-list changed without restarting it.

An agent finds mid-task that it needs one more host (a package mirror, an
API), or an operator wants one taken away now. Either reaches the exec that
runs the session through its control socket (``broker.host.control``: the
exec holds the session lock for as long as its command runs, so nothing
here waits for it), and the exec decides and applies it (``RunningNetwork``):
it holds what the decision needs, the manifest read for the session's own
sandbox identity when the exec began, the policy as its files say now, the
rule recorded with the session, and the proxy's interceptor. ``allow`` is
checked against the policy like an issue, for the session's requester: the
manifest with the destination added to its ``network.allow``, where only
the rule whose network allowed the session at issue may cover it (another
rule would bring other ``operations``, which the running proxy would not
apply: exit 3 naming the rule); that rule's operations, as the policy has
them now, apply to the proxy at once, before the destination does. A host
they limit that the session's CA (made at issue, name-constrained to the
hosts it terminated then) does not cover is refused (exit 3): the sandbox
trusts no other CA. A session the policy no longer allows at all is refused
too (``broker.core.running.standing`` logs the withdrawal once). ``disallow``
narrows, so it needs no rule. Only once the proxy has the change is it
logged (``session.allowed``, ``session.disallowed``, naming the destination
and the asker): a connection opened after this returns is decided on the
new list. A session with no running proxy on this host is refused (exit 2):
there is nothing to change, and nothing is logged.

Neither changes the session's stored manifest: a child session is covered by
its parent's manifest as issued (``broker.core.delegation.coverage``), so a
destination allowed later is never a child's, and a child itself, which runs
behind its parent's proxy, is refused (exit 2: change its parent's). An
allow under a rule that asks for an approval is refused (exit 3): the
approval was given for the manifest as it was, and a wider one needs a new
session and a new approval.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from broker.core.broker import Broker
from broker.core.credential.proxied import operations_checker
from broker.core.inputs.policy import Decision, decide
from broker.core.running.halting import Halt
from broker.core.running.standing import Standing
from broker.core.store.states import SessionState
from broker.egress.destinations import Destination, DestinationError, parse_destination
from broker.egress.terminate.interceptor import Interceptor
from broker.host.control import Refusal, ask_network
from broker.vocab.errors import REPORT_URL, BadInput, BrokerError, InternalError, PolicyDenied, UnknownSession
from broker.vocab.session_ids import check_session_id

LOG = logging.getLogger("broker.allowing")


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
    applied = ask_network(broker.config.state_dir, session_id, allow, str(destination))
    if isinstance(applied, Refusal):
        raise _refused(applied)
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


def _refused(refusal: Refusal) -> BrokerError:
    """The error the exec's refusal is, with its exit code (3: the policy's)."""
    if refusal.exit_code == PolicyDenied.exit_code:
        return PolicyDenied(refusal.message)
    if refusal.exit_code == InternalError.exit_code:
        return InternalError(refusal.message)
    return BadInput(refusal.message)


class RunningNetwork:
    """``session allow|disallow`` as the exec running the session does it (the control socket's thread calls it)."""

    def __init__(self, halt: Halt, standing: Standing) -> None:
        self.halt = halt
        self.standing = standing

    def __call__(self, allow: bool, text: str) -> bool | Refusal:
        """True once the proxy decides on the changed list; False when this exec runs no proxy (or ``text`` does not
        parse); the Refusal of an allow the policy or the session's CA refuses (nothing changed then)."""
        running = self.halt.running()
        if running is None:
            return False
        try:
            destination = parse_destination(text)
        except DestinationError:
            return False
        proxy, interceptor = running
        if allow:
            try:
                self._limit(destination, interceptor)
            except BrokerError as exc:
                return Refusal(exc.message, exc.exit_code)
            except Exception:  # a bug: the list stays as it was, the asker is told, the exec goes on
                LOG.exception("session allow failed")
                return Refusal(f"internal error in the exec's session allow; please report it at {REPORT_URL}", 1)
        proxy.proxy.change_allow(destination, allow=allow)
        return True

    def _limit(self, destination: Destination, interceptor: Interceptor | None) -> None:
        """Decide the allow; the rule's operations, as the policy has them now, put in the proxy before the
        destination is (exit 3 when the session's CA cannot cover a host they limit)."""
        decision = widened(self.standing, destination)
        if interceptor is None:  # a proxy that terminates nothing: no host can be limited
            outside = [str(host) for host in decision.operations.hosts()]
        else:
            outside = interceptor.relimit(operations_checker(decision))
        if outside:
            raise PolicyDenied(
                f"allowing {destination} denied: rule {decision.network.rule}'s operations limit"
                f" {', '.join(outside[:5])}, which the session's CA (made at issue, for the hosts the session"
                " terminated then) does not cover; issue a new session with it in network.allow"
            )


def widened(standing: Standing, destination: Destination) -> Decision:
    """The decision on the session's manifest with ``destination`` added, by the rule recorded with the session
    (exit 3, nothing changed, when it does not cover it, asks for an approval, or the session is withdrawn)."""
    prefix = f"allowing {destination} denied"
    standing.require(prefix)  # withdrawn: refused, and the withdrawal logged once
    rule = standing.network_rule
    if rule is None:
        raise PolicyDenied(
            f"{prefix}: session {standing.session_id} was issued without network destinations, so no rule's"
            " network is its own; issue a new session with it in network.allow"
        )
    broker, manifest = standing.broker, standing.manifest
    wider = replace(manifest, network=(*manifest.network, destination))
    decision = decide(broker.policy, wider, broker.requester, broker.config, network_rule=rule)
    if not decision.allowed:
        why = f"{prefix} by policy (only rule {rule}, which allowed the session, may add to its network)"
        raise PolicyDenied(decision.denial_message(why), decision.reasons)
    if decision.approval is not None:
        rules = ", ".join(name for name, _ in decision.approval.rules)
        raise PolicyDenied(
            f"{prefix}: rule {rules} asks for an approval of the manifest as issued;"
            " issue a new session with it in network.allow"
        )
    return decision
