"""``broker exec`` through the daemon: a session whose life is one client connection.

The client asks for an exec-bound session (``POST /v1/exec``) and then holds
it (``POST /v1/sessions/{id}/hold`` on the same connection), running the
sandbox itself. The session is a ``RunningSession``
(``broker.core.running.session``), the same object direct ``exec`` runs its
command in, opened here and held: its lock (so the daemon's own sweep leaves
the session alone), its standing, its ``broker.sock`` when its rules allow
children, its control socket (a direct-mode ``broker revoke`` on this host
asks the daemon instead of waiting on the lock: the proxy refuses at once,
and the hold ends the session, which answers the client, which stops the
command) and, with an allowlist, its egress proxy (the ``inject: proxy``
secrets never leave the daemon) on a Unix socket the client binds into its
sandbox. It is closed, in the one order a running session has (its proxy
refuses before the providers revoke, its last ``egress.request`` records are
written before the revocation is logged), when that connection ends (the
launcher exited, crashed or was killed), when the session is revoked or
expires, or when the daemon stops: nothing outlives the launcher. A session
that needs an approval answers 202 with its request (exit 8); the client
waits for the decision and asks again with ``resume``, and the session is
issued as approved (the digest binds it).
"""

from __future__ import annotations

import os
import select
import socket
import threading
from pathlib import Path
from typing import Any

from broker.core.approvals.settling import granted
from broker.core.broker import Broker
from broker.core.executing import ExecOptions, command_environment, network_mode
from broker.core.inputs.manifest import Manifest
from broker.core.revoking import RevokeReport
from broker.core.running.session import ProxyPlan, RunningSession, RunPlan
from broker.daemon.access import owned_session
from broker.daemon.peer import Peer
from broker.host.containers.engine import ENGINES, IMAGE, NO_OPTIONS
from broker.host.sandbox import check_network_enforceable, limits_check
from broker.vocab.errors import BadInput

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


class Holds:
    """The exec sessions this daemon holds, by session id: each a running session until it ends."""

    def __init__(self) -> None:
        self._held: dict[str, RunningSession] = {}
        self._mutex = threading.Lock()

    def get(self, session: str) -> RunningSession | None:
        with self._mutex:
            return self._held.get(session)

    def start(self, broker: Broker, peer: Peer, body: Any, link: Link) -> dict[str, Any]:
        """Issue an exec-bound session held by ``link``; the answer names what the client's sandbox needs."""
        manifest, options = _request(broker, peer, body)
        mode = network_mode(options, manifest)
        check_network_enforceable(options.sandbox, mode)  # the client builds the sandbox: it checks the rest
        proxy = None
        if mode == "allowlist":
            # A launcher that is not root binds the socket into its own sandbox: it passes through the
            # directory, which stays the daemon's (it can swap nothing there); bwrap run by root needs no way in.
            # A container's forwarder, a host process serving as the sandbox user, passes through to the socket too.
            passable = peer.uid not in (0, os.geteuid()) or options.sandbox in ENGINES
            proxy = ProxyPlan(_socket_owner(peer, manifest), passable=passable)
        enforce = limits_check(options.sandbox, root=peer.uid == 0)  # the client runs the sandbox, on this host
        plan = RunPlan(
            _sandbox_peer(peer, manifest), proxy, approved=approved_request(broker, peer, body), enforce=enforce
        )
        session = RunningSession(broker, manifest, plan).open()
        with self._mutex:
            self._held[session.id] = session
        link.sessions.append(session.id)  # from here on, the connection's end revokes the session
        assert session.document is not None
        return {
            "session": session.document.to_json(),
            "env": command_environment(session, options, body.get("parent_env") or {}),
            "sandbox": {"uid": manifest.sandbox.uid, "gid": manifest.sandbox.gid},
            "network": mode,
            "egress_socket": str(session.egress_socket) if session.egress_socket is not None else None,
            "read_only_root": manifest.sandbox.read_only_root,
            "engine": broker.config.engines.get(options.sandbox, NO_OPTIONS).to_json(),
        }

    def hold(self, broker: Broker, session: RunningSession, link: Link, stopping: threading.Event) -> RevokeReport:
        """Wait until the holder goes, the session is revoked or expires, or the daemon stops; then end it."""
        reason = "exec ended"
        assert session.expires_at is not None
        while not session.ended.is_set():
            if link.gone(WAKE) or session.halt.requested:
                break
            if stopping.is_set():
                reason = "daemon stopped"
                break
            if broker.clock() >= session.expires_at:
                reason = "expired"
                break
        return self.end(broker, session, reason)

    def end(self, broker: Broker, session: RunningSession, reason: str) -> RevokeReport:
        """Close the running session (its proxy refuses, then the providers revoke); once, whoever comes first."""
        try:
            return session.close(reason, by=broker)
        finally:
            with self._mutex:
                self._held.pop(session.id, None)

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
    sandbox, network, image = body.get("sandbox", "bwrap"), body.get("network"), body.get("image")
    if sandbox not in ("bwrap", "none", *ENGINES) or network not in (None, "none", "host", "allowlist"):
        raise BadInput("exec: sandbox is bwrap, podman, docker or none, network none, host or allowlist")
    if image is not None and not (isinstance(image, str) and IMAGE.fullmatch(image)):
        raise BadInput("exec: image is an image reference")
    workspace = body.get("workspace")
    if workspace is not None and not isinstance(workspace, str):
        raise BadInput("exec: workspace is a path")
    parent_env = body.get("parent_env")
    if parent_env is not None and not (
        isinstance(parent_env, dict) and all(isinstance(v, str) for v in parent_env.values())
    ):
        raise BadInput("exec: parent_env maps names to strings")
    options = ExecOptions(command=(), sandbox=sandbox, network=network, workspace=_path(workspace), image=image)
    return manifest, options


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def approved_request(broker: Broker, peer: Peer, body: Any) -> Any:
    """The approved request an exec (or a gateway's issue) resumes (``resume``), the peer's own; None for a new
    one."""
    request = body.get("resume")
    if request is None:
        return None
    if not isinstance(request, str):
        raise BadInput("resume is a request id")
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
