"""``exec``: issue, run a command with only its credentials, revoke when it ends.

The session's whole life, from its issue to its revocation, is a
``RunningSession`` (``broker.core.running.session``), the same the daemon
holds for an exec through it; the command runs inside its ``with``, and
whatever happens, the session is revoked when the command ends (a killed
broker leaves the session to ``sweep``). While the command runs, an outside
``broker revoke`` reaches the running session through its control socket
(``broker.core.running.halting``): the proxy refuses at once, the command is
stopped, and the running session's teardown revokes.

This module is where the sandbox is launched, the one place that knows its
kind: whether it can enforce ``--network allowlist`` (``network_mode``),
what the command sees (``child_environment``: PATH, HOME, LANG, TERM, the
session's hints and the manifest's ``sandbox.env``, never the broker's own
environment; with ``--sandbox none`` the hints point at the host directory),
who connects from inside it and whether it can enforce the session's limits
(``run_plan``). ``launch_command`` runs the command in it
(``broker.host.spawning``): with ``--sandbox bwrap`` inside bubblewrap as the
manifest's sandbox user (``broker.host.sandbox``), under the seccomp filter
of ``broker.host.seccomp``; with ``--sandbox podman|docker`` in a container of
``--image`` (``broker.host.containers``); with ``--sandbox none`` on the host,
as the sandbox user when the broker is root. SIGINT, SIGTERM and SIGHUP are
forwarded to the command. With ``sandbox.limits`` (or its rule's) the sandbox
runs in a cgroup of the session's (``broker.host.limits``), and a limit the
command went past is named in the result's ``notes``.

With ``--network allowlist`` (the default when the manifest has a
``network`` section) the sandbox gets its own network namespace whose only
way out is the session's egress proxy (``broker.egress``), bridged in on
``127.0.0.1:PORT``. A session that needs an approval is waited for (``wait``
seconds, default its rule's timeout; ``on_pending`` is told the request
first) and then issued as approved.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from broker.core.broker import Broker
from broker.core.inputs.manifest import Manifest
from broker.core.revoking import RevokeReport
from broker.core.running.session import ProxyPlan, RunningSession, RunPlan
from broker.core.session_document import SessionDocument
from broker.egress.proxy.bridge import forwarder_argv, proxy_hints, relay_argv
from broker.host.containers.engine import ENGINES, NO_OPTIONS
from broker.host.limits import limit_notes
from broker.host.sandbox import EGRESS_SOCKET, SANDBOX_PATH, WORKSPACE, limits_check
from broker.host.sandbox import check_sandbox_available as check_host_sandbox
from broker.host.spawning import Ended, Launch, launch
from broker.vocab.errors import AwaitingApproval

PASSED_THROUGH = ("LANG", "TERM")


@dataclass(frozen=True)
class ExecOptions:
    command: tuple[str, ...]
    sandbox: str = "bwrap"  # "podman", "docker" or "none"
    network: str | None = None  # "none", "host" or "allowlist"; None: allowlist when the manifest has a network
    workspace: Path | None = None
    read_only: tuple[str, ...] = ()
    image: str | None = None  # a container's


@dataclass(frozen=True)
class ExecResult:
    status: int
    session: str
    revoke: RevokeReport
    notes: tuple[str, ...] = ()  # each limit the command went past, named


def network_mode(options: ExecOptions, manifest: Manifest) -> str:
    if options.network is not None:
        return options.network
    return "allowlist" if manifest.network and options.sandbox in ("bwrap", "podman") else "none"


def check_sandbox_available(options: ExecOptions, manifest: Manifest | None = None) -> None:
    """Refuse before minting anything when the sandbox cannot be built here."""
    check_host_sandbox(options.sandbox, options.network, options.image)


def child_environment(
    document: SessionDocument, manifest: Manifest, options: ExecOptions, parent: Mapping[str, str]
) -> dict[str, str]:
    env: dict[str, str] = {}
    if options.sandbox != "none":
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


def command_environment(session: RunningSession, options: ExecOptions, parent: Mapping[str, str]) -> dict[str, str]:
    """What the command sees: ``child_environment``, and the proxy's variables when the session has one."""
    assert session.document is not None
    env = child_environment(session.document, session.manifest, options, parent)
    if session.proxy is not None:
        env.update(proxy_hints())
    return env


def run_plan(
    options: ExecOptions,
    manifest: Manifest,
    *,
    wait: float | None,
    on_pending: Callable[[AwaitingApproval], None] | None,
) -> RunPlan:
    """Direct exec's running session: inside the sandbox, the sandbox user; without root, the broker's own user (a
    user namespace maps the one to the other)."""
    root = os.geteuid() == 0
    inside = (manifest.sandbox.uid, manifest.sandbox.gid) if root else (os.geteuid(), os.getegid())
    proxy = None
    if network_mode(options, manifest) == "allowlist":
        # A container's forwarder, a host process serving as the sandbox user, passes through to the socket.
        owner = (manifest.sandbox.uid, manifest.sandbox.gid) if root else None
        proxy = ProxyPlan(owner, passable=options.sandbox in ENGINES)
    enforce = limits_check(options.sandbox, root=root)
    return RunPlan(inside, proxy, wait=wait, on_pending=on_pending, enforce=enforce)


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
    plan = run_plan(options, manifest, wait=wait, on_pending=on_pending)
    with RunningSession(broker, manifest, plan) as session:
        ended = launch_command(session, options)
    assert session.report is not None and session.document is not None
    notes = limit_notes(ended.past, ended.status, session.document.limits)
    return ExecResult(status=ended.status, session=session.id, revoke=session.report, notes=notes)


def launch_command(session: RunningSession, options: ExecOptions) -> Ended:
    """Run the command in the sandbox ``options`` names, with what the running session hands it; how it ended."""
    document, manifest, socket = session.document, session.manifest, session.egress_socket
    assert document is not None
    what = Launch(
        command=options.command,
        sandbox=options.sandbox,
        uid=manifest.sandbox.uid,
        gid=manifest.sandbox.gid,
        secrets_dir=document.dir,
        mount_path=document.mount_path,
        env=command_environment(session, options, os.environ),
        workspace=str(options.workspace.resolve()) if options.workspace else None,
        network=options.network,
        read_only=options.read_only,
        egress_socket=str(socket) if socket is not None else None,
        forwarder=tuple(forwarder_argv(EGRESS_SOCKET, [])),
        relay=tuple(relay_argv(str(socket.parent), (manifest.sandbox.uid, manifest.sandbox.gid))) if socket else (),
        session=document.id,
        limits=document.limits,
        image=options.image,
        engine=session.broker.config.engines.get(options.sandbox, NO_OPTIONS),
        read_only_root=manifest.sandbox.read_only_root,
        parent_env=os.environ,
    )
    return launch(what, started=session.attach_command)
