"""``exec``: issue, run a command with only its credentials, revoke when it ends.

The command gets a clean environment (PATH, HOME, LANG, TERM, the session's
hints and the manifest's ``sandbox.env``), never the broker's own. With
``--sandbox bwrap`` it runs inside bubblewrap as the manifest's sandbox user
(``broker.host.sandbox``), under the seccomp filter of ``broker.host.seccomp``; with
``--sandbox none`` it runs on the host, as the sandbox user when the broker
is root, and the hints point at the host directory. SIGINT, SIGTERM and
SIGHUP are forwarded to the command; whatever happens, the session is
revoked when the command ends, and a killed broker leaves the session to
``sweep``. While the command runs, an outside ``broker revoke`` reaches this
process through its control socket (``broker.core.running.halting``): the proxy
refuses at once, the command is stopped, and the teardown here revokes.

With ``--network allowlist`` (the default when the manifest has a
``network`` section) the sandbox gets its own network namespace whose only
way out is the session's egress proxy (``broker.egress``), bridged in on
``127.0.0.1:PORT``; the refused destinations are logged as ``egress.denied``
when the command ends, and the refused requests to credential hosts as
``egress.refused`` (``broker.egress.proxy.denials``). The proxy terminates TLS for
the hosts of ``inject: proxy`` credentials and the hosts the session's
operations limit; each request to them is an ``egress.request`` record,
written while the command runs (``broker.egress.evidence.writer``) and all
in the log before the session's revocation is.

A session whose rules need an approval is waited for (``wait`` seconds,
default its rule's timeout; ``on_pending`` is told the request first) and
then issued as approved. A session whose rules allow children gets its
``broker.sock``, served here while the command runs
(``broker.core.session_socket``) and closed before the session is revoked,
children first. Everything the exec does for its session while the command
runs (renewals, a ``kind: secret``'s new versions, children, ``session
allow``) is decided with the policy as its files say now
(``broker.core.running.standing``): a grant withdrawn meanwhile stops them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from broker.core.broker import Broker
from broker.core.credential.proxied import Interception, session_interception
from broker.core.delegation.budget import ChildBudget
from broker.core.delegation.socket_request import DelegationSocket
from broker.core.inputs.manifest import Manifest
from broker.core.issuing import issue
from broker.core.resuming import settle
from broker.core.revoking import RevokeReport, revoke_locked
from broker.core.running.allowing import RunningNetwork
from broker.core.running.forcing import Renewal
from broker.core.running.halting import Halt
from broker.core.running.refreshing import SecretRefresher
from broker.core.running.rotating import Rotator
from broker.core.running.standing import Standing, recorded_network_rule
from broker.core.session_document import SessionDocument
from broker.core.session_socket import SessionSocket
from broker.egress.evidence.writer import EvidenceWriter
from broker.egress.proxy.bridge import forwarder_argv, proxy_hints
from broker.egress.proxy.denials import log_denials
from broker.egress.proxy.thread import ProxyThread, proxy_thread
from broker.host.control import ControlSocket
from broker.host.egress_socket import EgressSocket, egress_root
from broker.host.sandbox import EGRESS_SOCKET, SANDBOX_PATH, WORKSPACE
from broker.host.sandbox import check_sandbox_available as check_host_sandbox
from broker.host.signals import signals_blocked
from broker.host.spawning import Launch, launch
from broker.vocab.errors import AwaitingApproval, BadInput

PASSED_THROUGH = ("LANG", "TERM")


@dataclass(frozen=True)
class ExecOptions:
    command: tuple[str, ...]
    sandbox: str = "bwrap"  # or "none"
    network: str | None = None  # "none", "host" or "allowlist"; None: allowlist when the manifest has a network
    workspace: Path | None = None
    read_only: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExecResult:
    status: int
    session: str
    revoke: RevokeReport


def network_mode(options: ExecOptions, manifest: Manifest) -> str:
    if options.network is not None:
        return options.network
    return "allowlist" if manifest.network and options.sandbox == "bwrap" else "none"


def check_sandbox_available(options: ExecOptions, manifest: Manifest | None = None) -> None:
    """Refuse before minting anything when the sandbox cannot be built here."""
    check_host_sandbox(options.sandbox, options.network)


def check_proxied(manifest: Manifest, mode: str) -> None:
    if manifest.proxied and mode != "allowlist":
        raise BadInput("inject: proxy needs --network allowlist: only the session's proxy can put the secret in")


def child_environment(
    document: SessionDocument, manifest: Manifest, options: ExecOptions, parent: Mapping[str, str]
) -> dict[str, str]:
    env: dict[str, str] = {}
    if options.sandbox == "bwrap":
        env["PATH"] = SANDBOX_PATH
        env["HOME"] = WORKSPACE
    else:
        env["PATH"] = parent.get("PATH", SANDBOX_PATH)
        env["HOME"] = str(options.workspace or Path.cwd())
    for name in PASSED_THROUGH:
        if name in parent:
            env[name] = parent[name]
    env.update(manifest.sandbox.env)
    mount_path, directory = document.mount_path, document.dir
    for key, value in document.env.items():
        if options.sandbox == "none" and value.startswith(mount_path + "/"):
            value = directory + value[len(mount_path) :]  # no mount: point at the host directory
        env[key] = value
    return env


def issue_or_wait(
    broker: Broker,
    manifest: Manifest,
    interception: Interception | None,
    delegation: DelegationSocket,
    *,
    wait: float | None,
    on_pending: Callable[[AwaitingApproval], None] | None,
) -> SessionDocument:
    """Issue; a session that needs an approval is waited for (up to ``wait`` seconds, None: its timeout; 0: not at
    all, exit 8) and issued once approved."""
    try:
        return issue(broker, manifest, interception, delegation=delegation)
    except AwaitingApproval as pending:
        if wait == 0:
            raise
        if on_pending is not None:
            on_pending(pending)
        approved = settle(broker, pending.request, wait=wait)
        return issue(broker, manifest, interception, approved=approved, delegation=delegation)


def execute(
    broker: Broker,
    manifest: Manifest,
    options: ExecOptions,
    *,
    wait: float | None = None,
    on_pending: Callable[[AwaitingApproval], None] | None = None,
) -> ExecResult:
    """Issue, run the command, revoke; returns the command's exit status as a shell reports it."""
    check_sandbox_available(options, manifest)
    mode = network_mode(options, manifest)
    check_proxied(manifest, mode)
    interception = session_interception(broker.config, manifest) if mode == "allowlist" else None
    interceptor = interception.interceptor if interception is not None else None
    # Inside, the sandbox user; without root, the broker's own user (a user namespace maps the one to the other).
    owner = (manifest.sandbox.uid, manifest.sandbox.gid) if os.geteuid() == 0 else (os.geteuid(), os.getegid())
    delegation = DelegationSocket(owner)
    document = issue_or_wait(broker, manifest, interception, delegation, wait=wait, on_pending=on_pending)
    session_id = document.id
    lock = broker.session_lock(session_id)
    lock.acquire()  # held while the command runs: if this broker dies, sweep revokes the session
    try:
        broker.store.mark_exec_bound(session_id)
        broker.log.checkpoint(str(broker.requester))
        halt = Halt()
        renewal = Renewal(manifest)  # broker renew of its proxied credentials, once they are renewed here
        session = broker.store.get_session(session_id)
        assert session is not None
        # the session as the policy decides it now: renewals, children and allows ask it; a withdrawal is logged
        standing = Standing(broker, manifest, session_id, recorded_network_rule(session.manifest))
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(standing)  # decided again every policy_refresh while the command runs
                if delegation.listener is not None:  # closed before the revocation below: no child comes after it
                    budget = ChildBudget(session_id, delegation.limits.rate, delegation.limits.total)
                    socket = SessionSocket(broker, session_id, delegation.listener, owner[0], budget, standing)
                    stack.enter_context(socket)
                network = RunningNetwork(halt, standing)  # session allow|disallow, decided and applied here
                stack.enter_context(ControlSocket(broker.config.state_dir, session_id, halt, network, renewal))
                proxy = None
                if mode == "allowlist":
                    sandbox = (manifest.sandbox.uid, manifest.sandbox.gid) if os.geteuid() == 0 else None
                    unix = EgressSocket(egress_root(broker.runtime), session_id, sandbox, passable=False)
                    evidence = session_evidence(broker, session_id, manifest.task)
                    proxy = stack.enter_context(
                        proxy_thread(manifest.network, unix=unix, interceptor=interceptor, evidence=evidence)
                    )
                    stack.callback(_log_denials, broker, proxy, session_id, manifest.task)
                if interceptor is not None:
                    stack.callback(interceptor.revoke)  # the proxy refuses before the providers revoke
                    # renewed behind their placeholders until the command ends (stopped before the revocation)
                    rotator = stack.enter_context(
                        Rotator(broker, manifest, session_id, session.expires_at, interceptor, standing)
                    )
                    # a kind: secret's new KV version swapped in behind its placeholder (stopped before it too)
                    refresher = SecretRefresher(broker, manifest, session_id, session.expires_at, interceptor, standing)
                    renewal.attach(rotator, stack.enter_context(refresher))
                halt.attach_proxy(proxy, interceptor)
                status = _run(document, manifest, options, proxy, halt)
        finally:
            with signals_blocked():
                record = broker.store.get_session(session_id)
                assert record is not None
                report = revoke_locked(broker, record, reason="revoke" if halt.requested else "exec ended")
    finally:
        lock.release()
    return ExecResult(status=status, session=session_id, revoke=report)


def session_evidence(broker: Broker, session_id: str, task: str) -> EvidenceWriter:
    """Where the session's proxy appends its ``egress.request`` records: the issuance log, from its own thread,
    within the session's ``[egress] evidence_budget`` and never into the room kept for revoke and sweep."""
    return EvidenceWriter(
        broker.log,
        session=session_id,
        task=task,
        requester=str(broker.requester),
        budget=broker.config.evidence_budget,
        room=broker.room,
    )


def _log_denials(broker: Broker, proxy: ProxyThread, session_id: str, task: str) -> None:
    log_denials(broker.log, proxy.denials(), session=session_id, task=task, requester=str(broker.requester))


def _run(
    document: SessionDocument, manifest: Manifest, options: ExecOptions, proxy: ProxyThread | None, halt: Halt
) -> int:
    env = child_environment(document, manifest, options, os.environ)
    if proxy is not None:
        env.update(proxy_hints())
    what = Launch(
        command=options.command,
        sandbox=options.sandbox,
        uid=manifest.sandbox.uid,
        gid=manifest.sandbox.gid,
        secrets_dir=document.dir,
        mount_path=document.mount_path,
        env=env,
        workspace=str(options.workspace.resolve()) if options.workspace else None,
        network=options.network,
        read_only=options.read_only,
        egress_socket=str(proxy.socket_path) if proxy is not None else None,
        forwarder=tuple(forwarder_argv(EGRESS_SOCKET, [])),
    )
    return launch(what, started=halt.attach_child)
