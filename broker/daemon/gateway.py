"""``broker issue --gateway``: the sessions the daemon's gateway holds, from their issue until revoke or expiry.

With ``[gateway] listen``, ``broker serve`` runs the gateway (``broker.egress.gateway``): one HTTP proxy for many
sessions. A session issued with ``--gateway`` (``POST /v1/gateway/sessions``) is a ``RunningSession``
(``broker.core.running.session``), the same object an exec's session is, opened on the parts the gateway's sessions
share (``broker.core.running.shared``) and held here, by id, because the gateway holds its secrets: they live in
this process only, so the daemon holds the session until it ends. It ends when it is revoked (through the daemon,
or an outside ``broker revoke`` on the gateway's control socket: the gateway refuses at once, then the session is
revoked), at its expiry, or when the daemon stops (then every gateway session is revoked: nothing of it survives
the process that held its secrets). The session lock is held all that time, so ``sweep`` leaves it alone, and
revokes it should the daemon die.

A rule that needs an approval answers 202 with the request; the client waits for the decision and asks again with
``resume``, and the session is issued as approved (the digest binds it).

Pages of the gateway's own host (a GET of a path, no proxy credential: the identity documents) are registered on
its listener where it is made here: ``self.gateway.route(path, answer)`` (``broker.egress.gateway.listener.Page``).
"""

from __future__ import annotations

import functools
import json
import logging
import resource
import threading
from typing import Any

from broker.core.broker import Broker
from broker.core.identity.documents import path_prefix
from broker.core.identity.issuer import Issuer
from broker.core.identity.wellknown import PATHS, answer
from broker.core.inputs.listening import GatewayConfig
from broker.core.inputs.manifest import Manifest, parse_manifest
from broker.core.revoking import RevokeReport
from broker.core.running.session import RunningSession, RunPlan
from broker.core.running.shared import SessionControls, SharedParts
from broker.core.running.timers import SharedTimers
from broker.core.session_document import SessionDocument
from broker.daemon.holds import approved_request
from broker.daemon.peer import Peer
from broker.egress.evidence.pump import EvidencePump
from broker.egress.gateway.listener import Gateway, Page, server_context
from broker.egress.gateway.passes import Address
from broker.vocab.errors import BadInput, BrokerError, ConfigError
from broker.vocab.files import read_bounded
from broker.vocab.logs import event

LOG = logging.getLogger("broker.daemon")
MAX_CA_FILE = 1024 * 1024
TIMER_WORKERS = 8  # renewals, refreshes, decisions and endings of every gateway session, a few at a time


class GatewayHolds:
    """The gateway and the sessions it holds (see the module docstring)."""

    def __init__(self, broker: Broker, settings: GatewayConfig) -> None:
        tls = (
            server_context(settings.cert_file, settings.key_file) if settings.cert_file and settings.key_file else None
        )
        ca = _ca_pem(settings) if settings.ca_file is not None else b""
        host, port = settings.advertise
        _room_for_descriptors()
        gateway = Gateway(
            settings.listen, Address("https" if tls else "http", host, port, ca), tls,
            max_connections=settings.max_connections,
        )  # fmt: skip
        if settings.listen[1] == 0:  # a port the kernel chose (tests): sessions are told that one
            gateway.address = Address(gateway.address.scheme, host, gateway.port, ca)
        if broker.metrics is not None:
            gateway.refused = broker.metrics.gateway_refused
            broker.metrics.gateway_sessions(lambda: gateway.sessions)
        self.broker = broker
        self.gateway = gateway
        self.shared = SharedParts(
            gateway,
            SharedTimers(TIMER_WORKERS, "gateway-timers"),
            EvidencePump(broker.log, room=broker.room),
            SessionControls(broker.config.state_dir),
            self._ended,
        )
        self._held: dict[str, RunningSession] = {}
        self._mutex = threading.Lock()
        if broker.issuer is not None:
            self._publish(broker, broker.issuer)
        event(LOG, "gateway listening", listen=f"{settings.listen[0]}:{gateway.port}", tls=tls is not None)

    def _publish(self, broker: Broker, issuer: Issuer) -> None:
        """The issuer's documents at its URL's paths (``[identity] issuer`` naming the gateway: verifiers fetch its
        keys from the host its sandboxes already reach), answered as the daemon's socket answers them."""
        prefix = path_prefix(issuer)

        def page(path: str) -> Page:
            found = answer(issuer, broker.config.providers, broker.store, path, broker.clock())
            assert found is not None  # one of the issuer's paths
            return Page(found.status, found.content_type, found.body, found.cache_control)

        for name in PATHS:
            self.gateway.route(prefix + name, functools.partial(page, prefix + name))

    def get(self, session: str) -> RunningSession | None:
        with self._mutex:
            return self._held.get(session)

    def open(self, broker: Broker, peer: Peer, body: Any) -> SessionDocument:
        """Issue a session the gateway serves and hold it; its document (``proxy_url`` names the gateway)."""
        manifest, approved = _request(broker, peer, body)
        plan = RunPlan((manifest.sandbox.uid, manifest.sandbox.gid), shared=self.shared, approved=approved)
        session = RunningSession(broker, manifest, plan).open()
        with self._mutex:
            self._held[session.id] = session
        assert session.document is not None
        return session.document

    def end(self, broker: Broker, session: RunningSession, reason: str) -> RevokeReport:
        """End a held session: the gateway refuses it at once (a revoke), then it is closed and revoked; once."""
        if reason == "revoke":
            session.halt.cut()  # its credential and tunnels cut before its renewals are waited for
        try:
            return session.close(reason, by=broker)
        finally:
            with self._mutex:
                self._held.pop(session.id, None)

    def _ended(self, session: RunningSession, reason: str) -> None:
        """A session halted from outside, or at its end: closed on a timer's worker (a failure is the log's)."""
        try:
            self.end(self.broker, session, reason)
            self.broker.checkpoint()
        except BrokerError as exc:
            event(LOG, "gateway session not revoked", session=session.id, reason=reason, error=exc.message)

    def close(self) -> None:
        """The daemon stops: every held session is revoked, then the gateway stops."""
        with self._mutex:
            held = list(self._held.values())
        for session in held:
            try:
                self.end(self.broker, session, "daemon stopped")
            except BrokerError as exc:
                event(LOG, "gateway session not revoked", session=session.id, error=exc.message)
        self.broker.checkpoint()
        self.shared.close()


def _request(broker: Broker, peer: Peer, body: Any) -> tuple[Manifest, Any]:
    """The manifest of ``POST /v1/gateway/sessions`` (``{"manifest": ..., "resume": REQUEST?}``)."""
    if not isinstance(body, dict) or not isinstance(body.get("manifest"), dict):
        raise BadInput("issue --gateway needs a JSON object with the manifest under 'manifest'")
    document = json.dumps(body["manifest"]).encode()
    manifest = parse_manifest(document, broker.config, as_json=True, identity=(peer.uid, peer.gid))
    return manifest, approved_request(broker, peer, body)


def _ca_pem(settings: GatewayConfig) -> bytes:
    assert settings.ca_file is not None
    try:
        data, _ = read_bounded(settings.ca_file, MAX_CA_FILE)
    except OSError as exc:
        raise ConfigError(f"gateway.ca_file: {settings.ca_file}: {exc.strerror}") from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise ConfigError(f"gateway.ca_file: {settings.ca_file} holds no PEM certificate")
    return data.rstrip(b"\n") + b"\n"


def _room_for_descriptors() -> None:
    """A gateway holds a lock and connections per session: the soft limit of open files raised to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
