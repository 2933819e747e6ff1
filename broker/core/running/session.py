"""A running session: one ``broker exec`` session from its issue to its revocation, as one object.

``broker exec`` (``broker.core.executing``, the command run inside the
``with``) and the daemon's held execs (``broker.daemon.holds``, which holds
it until its client's connection ends, the session is revoked or expires,
or the daemon stops, then calls ``close``) share it. It is built once from
its inputs (the broker, the manifest, a ``RunPlan``) and cares nothing for
which sandbox runs the command: the caller launches that, with what this
hands it (the session document, the proxy's socket, ``attach_command``).

Opening, in this order:

1. the session is issued (``broker.core.issuing``), or, when its rules need
   an approval, waited for (``plan.wait``; ``plan.on_pending`` is told the
   request first) and issued as approved (``plan.approved``: a request the
   caller resumes); with a proxy, its interceptor takes the ``inject:
   proxy`` secrets and the operations;
2. the session lock, held until the revocation (so ``sweep`` leaves the
   session alone while it runs, and revokes it if this process dies), the
   session marked exec-bound and the log signed;
3. the standing (``standing``): the session decided again with the policy as
   its files say now, every ``[egress] policy_refresh``, and asked by each of
   the parts below before it acts;
4. the session's socket (``broker.sock``), when its rules allow children
   (``session_socket``, with the tree's ``ChildBudget``:
   ``broker.core.delegation.budget``);
5. the control socket (``broker.host.control``): an outside revoke
   (``halting``), ``session allow|disallow`` (``allowing``) and ``broker
   renew`` (``forcing``) reach the session there;
6. with a proxy (``--network allowlist``), the session's egress proxy on its
   Unix socket, writing its ``egress.request`` records through the evidence
   writer;
7. the proxy's secrets, held until the end (``Interceptor.revoke``);
8. the renewals (``rotating``) and the refreshes (``refreshing``) of its
   proxied credentials, behind their placeholders;
9. the renewals of its projected tokens in their files (``projecting``).

A session a gateway holds (``RunPlan.shared``: ``broker.core.running.shared``)
is opened the same way, its parts built on what the gateway's sessions share
rather than a thread each: its proxy a seat on the gateway (with the
session's proxy credential, written into its directory at issue), its timed
parts on the shared timers, its evidence through the shared pump, its control
socket the shared one; it has no ``broker.sock`` (children need ``broker
exec``) and no command: it ends when revoked (``Halt`` tells the holder), at
its expiry (a timer), or when the daemon stops.

``close`` tears them down in exactly the reverse order, then revokes: the
renewals (the projected tokens' first) and refreshes stop first (one under way finishes, so the revocation
sees every credential they made), the proxy drops its secrets and refuses
before the providers revoke, the proxy stops (its last ``egress.request``
records written) and its refusals are logged (``egress.denied``,
``egress.refused``), the control socket and the session's socket close (no
child after this: the revocation takes the children), the standing stops;
then the session is revoked (``broker.core.revoking``: its records after
every record above), the log signed and the lock released. A failure while
opening tears down what had opened and revokes the session the same way
(``exec failed to start``). ``close`` runs once, whoever comes first.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from broker.core.approvals.settling import settle
from broker.core.broker import Broker
from broker.core.credential.proxied import Interception, session_interception
from broker.core.delegation.budget import ChildBudget
from broker.core.inputs.manifest import Manifest
from broker.core.issuing import DelegationSocket, issue
from broker.core.revoking import RevokeReport, revoke_locked
from broker.core.running.allowing import RunningNetwork
from broker.core.running.forcing import Renewal
from broker.core.running.halting import Halt
from broker.core.running.projecting import Projector
from broker.core.running.refreshing import SecretRefresher
from broker.core.running.rotating import Rotator
from broker.core.running.session_socket import SessionSocket
from broker.core.running.shared import SharedParts
from broker.core.running.standing import Standing, recorded_network_rule
from broker.core.session_document import SessionDocument
from broker.core.store.interface import ApprovalRecord
from broker.egress.evidence.writer import EvidenceWriter
from broker.egress.gateway.passes import PROXY_DIR
from broker.egress.proxy.denials import log_denials
from broker.egress.proxy.listener import EgressProxy
from broker.egress.proxy.thread import ProxyThread, ServedProxy
from broker.egress.terminate.interceptor import Interceptor
from broker.host.control import Controls, ControlSocket
from broker.host.egress_socket import EgressSocket, egress_root
from broker.host.signals import signals_blocked
from broker.vocab.errors import AwaitingApproval, BadInput, StateError
from broker.vocab.holding import Lock

if TYPE_CHECKING:
    import subprocess

    from broker.host.limits import Limits


@dataclass(frozen=True)
class ProxyPlan:
    """The session's egress proxy (``--network allowlist``): who connects to its socket from inside the sandbox
    (``owner``; None: the broker's own user), and whether a launcher that is not root must pass through its
    directory to bind it into its own sandbox (``passable``; ``broker.host.egress_socket``)."""

    owner: tuple[int, int] | None
    passable: bool = False


@dataclass(frozen=True)
class RunPlan:
    """What a running session is opened with, besides the broker and the manifest: who connects to its
    ``broker.sock`` from inside the sandbox (``inside``), its proxy (None: no proxy), and its approval: the approved
    request it resumes, or how long to wait for one (None: its rule's timeout; 0: not at all, exit 8); the
    sandbox's check that it can enforce the session's limits (``enforce``), made before anything is minted;
    ``shared``: a gateway holds it, its parts built on what the gateway's sessions share (its proxy the gateway)."""

    inside: tuple[int, int]
    proxy: ProxyPlan | None = None
    shared: SharedParts | None = None
    approved: ApprovalRecord | None = None
    wait: float | None = 0.0
    on_pending: Callable[[AwaitingApproval], None] | None = None
    enforce: Callable[[Limits], None] | None = None  # the sandbox's: refuses limits its host cannot enforce


class RunningSession:
    """One exec's session while its command runs (see the module docstring): ``open``, then ``close`` once."""

    def __init__(self, broker: Broker, manifest: Manifest, plan: RunPlan) -> None:
        self.broker = broker
        self.manifest = manifest
        self.plan = plan
        shared = plan.shared
        then = (lambda: shared.end_soon(self, "revoke")) if shared is not None else None
        self.halt = Halt(then=then)  # an outside revoke, through the control socket (a gateway's: then ended)
        self.renewal = Renewal(manifest)  # broker renew of its proxied credentials, once they are renewed here
        self.interceptor: Interceptor | None = None
        self.proxy: ServedProxy | None = None
        self.document: SessionDocument | None = None
        self.expires_at: datetime | None = None
        self.report: RevokeReport | None = None
        self.ended = threading.Event()  # closed: revoked (or its revocation failed)
        self._parts = contextlib.ExitStack()  # what opened, torn down in reverse
        self._lock: Lock | None = None
        self._mutex = threading.Lock()  # one close, whoever comes first
        self._closing = broker  # the broker acting for whoever closes it (the daemon: that peer)

    @property
    def id(self) -> str:
        assert self.document is not None, "the running session is not open"
        return self.document.id

    @property
    def egress_socket(self) -> Path | None:
        """The proxy's Unix socket on the host, which the sandbox binds in (None: no proxy)."""
        return self.proxy.socket_path if self.proxy is not None else None

    def attach_command(self, child: subprocess.Popen[bytes]) -> None:
        """The command runs: it is stopped when the session is revoked from outside (``halting``)."""
        self.halt.attach_child(child)

    def __enter__(self) -> RunningSession:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close("exec ended")

    def open(self) -> RunningSession:
        """Issue (or wait for the approval first), then start every part; on failure, undo what started."""
        broker, manifest, plan = self.broker, self.manifest, self.plan
        if manifest.proxied and plan.proxy is None and plan.shared is None:
            raise BadInput("inject: proxy needs --network allowlist: only the session's proxy can put the secret in")
        if plan.shared is not None and PROXY_DIR in {request.name for request in manifest.credentials}:
            raise BadInput(f"credential name {PROXY_DIR!r} is the gateway's own (proxy/credential): rename it")
        self.interception: Interception | None = (
            session_interception(broker.config, manifest) if plan.proxy is not None or plan.shared else None
        )
        if self.interception is not None and plan.shared is not None:
            self.interception.gateway = plan.shared.gateway.new_pass()  # its proxy credential, written at issue
        self.interceptor = self.interception.interceptor if self.interception is not None else None
        delegation = DelegationSocket(plan.inside) if plan.shared is None else None  # a gateway's: no broker.sock
        self.document = self._issue(delegation)
        self._lock = broker.session_lock(self.id)
        self._lock.acquire()  # held until the revocation: if this process dies, sweep revokes the session
        try:
            self._start(delegation)
        except BaseException:
            self.close("exec failed to start")
            raise
        return self

    def _issue(self, delegation: DelegationSocket | None) -> SessionDocument:
        broker, manifest, plan = self.broker, self.manifest, self.plan
        try:
            return issue(
                broker, manifest, self.interception, approved=plan.approved, delegation=delegation, enforce=plan.enforce
            )
        except AwaitingApproval as pending:
            if plan.wait == 0 or plan.approved is not None:
                raise
            if plan.on_pending is not None:
                plan.on_pending(pending)
            approved = settle(broker, pending.request, wait=plan.wait)
            return issue(
                broker, manifest, self.interception, approved=approved, delegation=delegation, enforce=plan.enforce
            )

    def _start(self, delegation: DelegationSocket | None) -> None:
        broker, manifest, session_id, parts, shared = self.broker, self.manifest, self.id, self._parts, self.plan.shared
        broker.store.mark_exec_bound(session_id)
        broker.checkpoint()
        record = broker.store.get_session(session_id)
        assert record is not None
        self.expires_at = record.expires_at
        timers = shared.timers if shared is not None else None  # None: a thread of its own for each timed part
        standing = Standing(broker, manifest, session_id, recorded_network_rule(record.manifest), timers=timers)
        parts.enter_context(standing)  # decided again every policy_refresh while the command runs
        if delegation is not None and delegation.listener is not None:  # its rules allow children
            budget = ChildBudget(session_id, delegation.limits.rate, delegation.limits.total)
            parts.enter_context(
                SessionSocket(broker, session_id, delegation.listener, self.plan.inside[0], budget, standing)
            )
        network = RunningNetwork(self.halt, standing)  # session allow|disallow, decided and applied here
        if shared is None:
            parts.enter_context(ControlSocket(broker.config.state_dir, session_id, self.halt, network, self.renewal))
        else:
            parts.enter_context(shared.controls.held(session_id, Controls(self.halt, network, self.renewal)))
        if self.interceptor is not None:
            self.proxy = self._serve_proxy()
            parts.callback(self._stop_proxy)
            parts.callback(self.interceptor.revoke)  # the proxy refuses before the providers revoke
            expires_at = record.expires_at
            rotator = Rotator(broker, manifest, session_id, expires_at, self.interceptor, standing, timers)
            refresher = SecretRefresher(
                broker, manifest, session_id, expires_at, self.interceptor, standing, None, timers
            )
            self.renewal.attach(parts.enter_context(rotator), parts.enter_context(refresher))
        parts.enter_context(Projector(broker, manifest, record, standing))  # its session tokens, in their files
        self.halt.attach_proxy(self.proxy, self.interceptor)
        if shared is not None:  # no command ends it: its holder does, at its end at the latest
            left = (record.expires_at - broker.clock()).total_seconds()
            expiry = shared.timers.start("expiry", self._expired, left)
            parts.callback(expiry.stop)

    def _expired(self) -> None:
        """A gateway's session at its end: its holder ends it (on the timer's worker)."""
        assert self.plan.shared is not None
        self.plan.shared.end(self, "expired")

    def _serve_proxy(self) -> ServedProxy:
        """The session's proxy on its Unix socket (a gateway's session: a seat on the gateway, for its proxy
        credential), its ``egress.request`` records through the evidence writer (within the session's ``[egress]
        evidence_budget``, never into the room kept for revoke and sweep)."""
        broker, session_id, plan, shared = self.broker, self.id, self.plan.proxy, self.plan.shared
        unix = None
        if shared is None:
            assert plan is not None
            unix = EgressSocket(egress_root(broker.runtime), session_id, plan.owner, passable=plan.passable)
        evidence = EvidenceWriter(
            broker.log,
            session=session_id,
            task=self.manifest.task,
            requester=str(broker.requester),
            budget=broker.config.evidence_budget,
            room=broker.room,
            pump=shared.pump if shared is not None else None,
        )
        proxy = EgressProxy(self.manifest.network, None, None, self.interceptor, evidence)
        if broker.metrics is not None:
            proxy.decided = broker.metrics.egress  # each decision counted in the daemon's metrics
        if shared is not None:
            gateway = self.interception.gateway if self.interception is not None else None
            assert gateway is not None and self.expires_at is not None
            try:
                seat = shared.gateway.seat(session_id, proxy, gateway.digest, self.expires_at.timestamp())
            except BaseException:
                evidence.close()
                raise
            finally:
                gateway.forget()  # the gateway keeps its hash; the secret is the session directory's alone
            return seat
        assert unix is not None
        thread = ProxyThread(proxy)
        try:
            thread.serve_unix(unix)
        except BaseException:
            thread.stop()
            raise
        return thread

    def _stop_proxy(self) -> None:
        """Stop the proxy (its last ``egress.request`` records written), then log what it refused."""
        assert self.proxy is not None
        denials = self.proxy.denials()
        self.proxy.stop()
        broker = self._closing
        log_denials(broker.log, denials, session=self.id, task=self.manifest.task, requester=str(broker.requester))

    def close(self, reason: str, *, by: Broker | None = None) -> RevokeReport:
        """Tear down what opened, in reverse, then revoke the session (``reason``; ``revoke`` when an outside revoke
        halted it) and release its lock; once, whoever comes first (``by``: the broker acting for whoever ends it)."""
        with self._mutex:
            if self.ended.is_set():
                if self.report is None:
                    raise StateError(f"session {self.id}: its revocation failed; broker sweep finishes it")
                return self.report
            broker = self._closing = by or self.broker
            if self.halt.requested:
                reason = "revoke"  # asked through the control socket
            try:
                try:
                    self._parts.close()
                finally:
                    with signals_blocked():  # a second signal cannot cut the revocation short
                        record = broker.store.get_session(self.id)
                        assert record is not None
                        self.report = revoke_locked(broker, record, reason=reason)
                    broker.checkpoint()
            finally:
                assert self._lock is not None
                self._lock.release()
                self.ended.set()
            return self.report
