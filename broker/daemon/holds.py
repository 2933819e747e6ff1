"""``broker exec`` through the daemon: a session whose life is one client connection.

The client asks for an exec-bound session (``POST /v1/exec``) and then holds
it (``POST /v1/sessions/{id}/hold`` on the same connection), running the
sandbox itself. The daemon holds the session's lock meanwhile, as direct
``exec`` does, so its own sweep leaves the session alone; it revokes the
session when that connection ends (the launcher exited, crashed or was
killed), when the session expires, or when the daemon stops: nothing outlives
the launcher. With an allowlist the session's egress proxy runs here (the
``inject: proxy`` secrets never leave the daemon) on a Unix socket the client
binds into its sandbox; ending the session closes the proxy first, so it
refuses at once, and then revokes at the providers; stopping the proxy writes
its last ``egress.request`` records before the revocation is logged. Each held session
listens on the same control socket as a direct ``exec``
(``broker.host.control``), so a direct-mode ``broker revoke`` on this host
asks the daemon instead of waiting on the lock: the proxy refuses at once
(``broker.core.running.halting``), and the hold ends the session, which answers the
client, which stops the command. A session whose rules allow children has its
``broker.sock`` served here too (``broker.core.session_socket``), closed
before the session ends. A session that needs an approval answers 202 with
its request (exit 8); the client waits for the decision and asks again with
``resume``, and the session is issued as approved (the digest binds it).
"""

from __future__ import annotations

import os
import select
import socket
import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.core.broker import Broker
from broker.core.credential.proxied import session_interception
from broker.core.delegation.budget import ChildBudget
from broker.core.delegation.socket_request import DelegationSocket
from broker.core.executing import ExecOptions, check_proxied, child_environment, network_mode, session_evidence
from broker.core.inputs.manifest import Manifest
from broker.core.issuing import issue
from broker.core.resuming import granted
from broker.core.revoking import RevokeReport, revoke_locked
from broker.core.running.allowing import RunningNetwork
from broker.core.running.forcing import Renewal
from broker.core.running.halting import Halt
from broker.core.running.refreshing import SecretRefresher
from broker.core.running.rotating import Rotator
from broker.core.running.standing import Standing, recorded_network_rule
from broker.core.session_socket import SessionSocket
from broker.daemon.access import owned_session
from broker.daemon.peer import Peer
from broker.egress.proxy.bridge import proxy_hints
from broker.egress.proxy.denials import log_denials
from broker.egress.proxy.listener import EgressProxy
from broker.egress.proxy.thread import ProxyThread
from broker.host.control import ControlSocket
from broker.host.egress_socket import EgressSocket, egress_root
from broker.host.sandbox import check_network_enforceable
from broker.vocab.errors import BadInput
from broker.vocab.holding import Lock

if TYPE_CHECKING:
    from broker.egress.terminate.interceptor import Interceptor

WAKE = 0.5  # how often a hold looks at the session's expiry and the daemon's stop


class Link:
    """One client connection of the daemon: the exec sessions it holds, and whether its peer is gone."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sessions: list[str] = []

    def gone(self, timeout: float) -> bool:
        """Whether the peer closed (or sent anything: a holder sends nothing after its hold), within ``timeout``."""
        poller = select.poll()
        poller.register(self.sock, select.POLLIN | select.POLLRDHUP | select.POLLHUP)
        return bool(poller.poll(int(timeout * 1000)))


@dataclass
class Held:
    session: str
    task: str
    lock: Lock
    expires_at: datetime
    proxy: ProxyThread | None = None
    interceptor: Interceptor | None = None
    report: RevokeReport | None = None
    halt: Halt = field(default_factory=Halt)  # an outside revoke through the control socket
    control: ControlSocket | None = None
    rotator: Rotator | None = None  # renews its proxied credentials behind their placeholders
    refresher: SecretRefresher | None = None  # swaps in a kind: secret's new KV version behind its placeholder
    session_socket: SessionSocket | None = None  # its broker.sock, when its rules allow children
    standing: Standing | None = None  # the session as the policy decides it now (renewals, children, allows)
    ended: threading.Event = field(default_factory=threading.Event)
    mutex: threading.Lock = field(default_factory=threading.Lock)


class Holds:
    """The exec sessions this daemon holds, by session id."""

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}
        self._mutex = threading.Lock()

    def get(self, session: str) -> Held | None:
        with self._mutex:
            return self._held.get(session)

    def start(self, broker: Broker, peer: Peer, body: Any, link: Link) -> dict[str, Any]:
        """Issue an exec-bound session held by ``link``; the answer names what the client's sandbox needs."""
        manifest, options = _request(broker, peer, body)
        mode = network_mode(options, manifest)
        check_network_enforceable(options.sandbox, mode)  # the client builds the sandbox: it checks the rest
        check_proxied(manifest, mode)
        owner = _socket_owner(peer, manifest) if mode == "allowlist" else None
        interception = session_interception(broker.config, manifest) if mode == "allowlist" else None
        interceptor = interception.interceptor if interception is not None else None
        inside = _sandbox_peer(peer, manifest)
        delegation = DelegationSocket(inside)
        approved = _approved(broker, peer, body)
        document = issue(broker, manifest, interception, approved=approved, delegation=delegation)
        record = broker.store.get_session(document.id)
        assert record is not None
        held = Held(record.id, record.task, broker.session_lock(record.id), record.expires_at, interceptor=interceptor)
        held.lock.acquire()  # held until the session ends: the daemon's sweep leaves it alone meanwhile
        with self._mutex:
            self._held[held.session] = held
        link.sessions.append(held.session)  # from here on, the connection's end revokes the session
        try:
            standing = Standing(broker, manifest, held.session, recorded_network_rule(record.manifest))
            held.standing = standing.start()  # decided again every policy_refresh while the session is held
            if delegation.listener is not None:
                budget = ChildBudget(held.session, delegation.limits.rate, delegation.limits.total)
                held.session_socket = SessionSocket(
                    broker, held.session, delegation.listener, inside[0], budget, standing
                )
                held.session_socket.start()
            renewal = Renewal(manifest)  # broker renew of its proxied credentials, once they are renewed here
            network = RunningNetwork(held.halt, standing)  # session allow|disallow, decided and applied here
            control = ControlSocket(broker.config.state_dir, held.session, held.halt, network, renewal)
            held.control = control
            broker.store.mark_exec_bound(held.session)
            broker.checkpoint()
            env = child_environment(document, manifest, options, body.get("parent_env") or {})
            if owner is not None:
                # A launcher that is not root binds the socket into its own sandbox: it passes through the
                # directory, which stays the daemon's (it can swap nothing there); bwrap run by root needs no way in.
                passable = peer.uid not in (0, os.geteuid())
                unix = EgressSocket(egress_root(broker.runtime), held.session, owner, passable=passable)
                evidence = session_evidence(broker, held.session, held.task)
                proxy = EgressProxy(manifest.network, None, None, interceptor, evidence)
                if broker.metrics is not None:
                    proxy.decided = broker.metrics.egress  # each decision counted in the daemon's metrics
                held.proxy = ProxyThread(proxy)
                held.proxy.serve_unix(unix)
                env.update(proxy_hints())
            held.halt.attach_proxy(held.proxy, interceptor)
            if interceptor is not None:
                expires_at = record.expires_at
                held.rotator = Rotator(broker, manifest, held.session, expires_at, interceptor, standing).start()
                held.refresher = SecretRefresher(broker, manifest, held.session, expires_at, interceptor, standing)
                held.refresher.start()
                renewal.attach(held.rotator, held.refresher)
        except BaseException:
            self.end(broker, held, "exec failed to start")
            raise
        return {
            "session": document.to_json(),
            "env": env,
            "sandbox": {"uid": manifest.sandbox.uid, "gid": manifest.sandbox.gid},
            "network": mode,
            "egress_socket": str(held.proxy.socket_path) if held.proxy is not None else None,
        }

    def hold(self, broker: Broker, held: Held, link: Link, stopping: threading.Event) -> RevokeReport:
        """Wait until the holder goes, the session is revoked or expires, or the daemon stops; then end it."""
        reason = "exec ended"
        while not held.ended.is_set():
            if link.gone(WAKE) or held.halt.requested:
                break
            if stopping.is_set():
                reason = "daemon stopped"
                break
            if broker.clock() >= held.expires_at:
                reason = "expired"
                break
        return self.end(broker, held, reason)

    def end(self, broker: Broker, held: Held, reason: str) -> RevokeReport:
        """Close the proxy (it refuses from now on), then revoke at the providers; once, whoever comes first."""
        with held.mutex:
            if held.report is not None:
                return held.report
            if held.halt.requested:
                reason = "revoke"  # asked through the control socket, as a direct exec is
            try:
                if held.session_socket is not None:
                    held.session_socket.close()  # no child after this; the revocation below takes the children
                if held.control is not None:
                    held.control.close()  # never from its own thread: a revoke there only halts
                if held.rotator is not None:
                    held.rotator.stop()  # a renewal under way ends first: the revocation sees what it made
                if held.refresher is not None:
                    held.refresher.stop()  # likewise a refresh under way
                if held.standing is not None:
                    held.standing.stop()
                if held.interceptor is not None:
                    held.interceptor.revoke()
                if held.proxy is not None:
                    denials = held.proxy.denials()
                    held.proxy.stop()
                    requester = str(broker.requester)
                    log_denials(broker.log, denials, session=held.session, task=held.task, requester=requester)
                record = broker.store.get_session(held.session)
                assert record is not None
                held.report = revoke_locked(broker, record, reason=reason)
                broker.checkpoint()
            finally:
                held.lock.release()
                with self._mutex:
                    self._held.pop(held.session, None)
                held.ended.set()
            return held.report

    def release(self, broker: Broker, link: Link) -> None:
        """The connection closed: end every session it still holds."""
        for session in link.sessions:
            held = self.get(session)
            if held is not None:
                self.end(broker, held, "exec ended")


def _request(broker: Broker, peer: Peer, body: Any) -> tuple[Manifest, ExecOptions]:
    import json

    from broker.core.inputs.manifest import parse_manifest

    if not isinstance(body, dict) or not isinstance(body.get("manifest"), dict):
        raise BadInput("exec needs a JSON object with the manifest under 'manifest'")
    document = json.dumps(body["manifest"]).encode()
    manifest = parse_manifest(document, broker.config, as_json=True, identity=(peer.uid, peer.gid))
    sandbox, network = body.get("sandbox", "bwrap"), body.get("network")
    if sandbox not in ("bwrap", "none") or network not in (None, "none", "host", "allowlist"):
        raise BadInput("exec: sandbox is bwrap or none, network none, host or allowlist")
    workspace = body.get("workspace")
    if workspace is not None and not isinstance(workspace, str):
        raise BadInput("exec: workspace is a path")
    parent_env = body.get("parent_env")
    if parent_env is not None and not (
        isinstance(parent_env, dict) and all(isinstance(v, str) for v in parent_env.values())
    ):
        raise BadInput("exec: parent_env maps names to strings")
    return manifest, ExecOptions(command=(), sandbox=sandbox, network=network, workspace=_path(workspace))


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _approved(broker: Broker, peer: Peer, body: Any) -> Any:
    """The approved request an exec resumes (``resume``), the peer's own; None for a new exec."""
    request = body.get("resume")
    if request is None:
        return None
    if not isinstance(request, str):
        raise BadInput("exec: resume is a request id")
    owned_session(broker, peer, request, "collect")
    approval = broker.store.get_approval(request)
    if approval is None:
        raise BadInput(f"unknown approval request {request[:64]!r}")
    return granted(approval)


def _sandbox_peer(peer: Peer, manifest: Manifest) -> tuple[int, int]:
    """Who connects from inside the sandbox: the sandbox user when the client is root (setpriv), else the client
    (a user namespace maps the sandbox user to it)."""
    return (manifest.sandbox.uid, manifest.sandbox.gid) if peer.uid == 0 else (peer.uid, peer.gid)


def _socket_owner(peer: Peer, manifest: Manifest) -> tuple[int, int]:
    """Who connects to the proxy from inside the sandbox: the sandbox user when the client is root (setpriv),
    else the client itself (a user namespace maps the sandbox user to it)."""
    owner = (manifest.sandbox.uid, manifest.sandbox.gid) if peer.uid == 0 else (peer.uid, peer.gid)
    if os.geteuid() != 0 and owner[0] != os.geteuid():
        raise BadInput("exec --network allowlist through a daemon that is not root needs the daemon's own user")
    return owner
