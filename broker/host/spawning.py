"""Running ``exec``'s command: found on its PATH, started as the sandbox user when asked, stop signals forwarded.

``launch`` is the one way direct ``exec`` and the daemon's client both run it:
inside bubblewrap under the seccomp filter (``broker.host.sandbox``,
``broker.host.seccomp``), behind the egress forwarder when there is a proxy;
in a container of podman or docker (``broker.host.containers``), in the
network namespace of the forwarder when there is a proxy; or on the host, as
the sandbox user when the launcher is root. With limits, the sandbox runs in
the session's cgroup (``broker.host.limits``): bubblewrap's first process
enters it before anything else runs, a container is made under it; what the
command went past is read back before the cgroup is removed (``Ended``).

A shell's statuses: 127 when the command is not there, 126 when it may not
run, 128+N when a signal ended it. While it runs, SIGINT, SIGTERM and SIGHUP
sent to the launcher go to the command instead, so its teardown runs after
the command has ended. A command whose session ends under it is stopped the
one way (``stop``): SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from broker.host.containers.engine import (
    ENGINES,
    NO_OPTIONS,
    ContainerSpec,
    EngineOptions,
    engine_env,
    engine_path,
    env_file_content,
    remove_argv,
    run_argv,
)
from broker.host.containers.relay import Relay
from broker.host.limits import CONTAINER_KEYS, NO_LIMITS, Limits, SessionCgroup
from broker.host.sandbox import SANDBOX_PATH, SandboxSpec, bwrap_command, extra_binds
from broker.host.seccomp import program_fd
from broker.vocab.errors import BadInput
from broker.vocab.files import write_private_file

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
COMMAND_NOT_FOUND = 127
NOT_EXECUTABLE = 126
GRACE = 5.0  # seconds between SIGTERM and SIGKILL for a command whose session ended under it


@dataclass(frozen=True)
class Launch:
    """What runs, where: the session's directory, the sandbox user and the sandbox's shape."""

    command: tuple[str, ...]
    sandbox: str  # "bwrap", "podman", "docker" or "none"
    uid: int
    gid: int
    secrets_dir: str
    mount_path: str
    env: Mapping[str, str]
    workspace: str | None = None
    network: str | None = None  # "host" shares the host's network; anything else gets its own namespace
    read_only: tuple[str, ...] = ()
    egress_socket: str | None = None  # the proxy's Unix socket on the host, bound in at EGRESS_SOCKET
    forwarder: tuple[str, ...] = ()  # with an egress socket: the argv the command runs behind
    relay: tuple[str, ...] = ()  # a container's: the forwarder serving its network namespace (bridge.relay_argv)
    session: str = ""  # names the session's cgroup and container
    limits: Limits = NO_LIMITS
    image: str | None = None  # a container's
    engine: EngineOptions = NO_OPTIONS  # [sandbox.podman] or [sandbox.docker]
    read_only_root: bool = True  # a container's root file system
    parent_env: Mapping[str, str] = field(default_factory=dict)  # the launcher's: what the engine's CLI may need


@dataclass(frozen=True)
class Ended:
    """How the command ended: its status as a shell reports it, and the limits a process of it went past."""

    status: int
    past: tuple[str, ...] = ()


def launch(what: Launch, started: Callable[[subprocess.Popen[bytes]], None]) -> Ended:
    """Run the command to its end, in the session's cgroup when it has limits."""
    limits = what.limits.only(CONTAINER_KEYS) if what.sandbox in ENGINES else what.limits
    if limits.empty:
        return Ended(_run(what, started, None))
    if what.sandbox not in ("bwrap", *ENGINES):
        raise BadInput("sandbox.limits need a sandbox: --sandbox bwrap, podman or docker")
    cgroup = SessionCgroup(what.session, limits)
    try:
        status = _run(what, started, cgroup)
        return Ended(status, cgroup.went_past())
    finally:
        cgroup.remove()


def _run(what: Launch, started: Callable[[subprocess.Popen[bytes]], None], cgroup: SessionCgroup | None) -> int:
    """The command's status as a shell reports it."""
    command = list(what.command)
    if what.sandbox in ENGINES:
        return _container(what, started, cgroup)
    if what.sandbox == "bwrap":
        if resolve(command[0], SANDBOX_PATH) is None:
            return COMMAND_NOT_FOUND
        spec = SandboxSpec(
            uid=what.uid,
            gid=what.gid,
            secrets_dir=what.secrets_dir,
            mount_path=what.mount_path,
            workspace=what.workspace,
            env=dict(what.env),
            network=what.network == "host",
            read_only_binds=extra_binds(what.read_only),
            egress_socket=what.egress_socket,
        )
        if what.egress_socket is not None:
            command = [*what.forwarder, *command]
        with program_fd() as seccomp_fd:
            argv = [*bwrap_command(spec, seccomp_fd=seccomp_fd), *command]
            if cgroup is not None:
                argv = [*cgroup.enter_argv(), *argv]
            return spawn(argv, env={"PATH": SANDBOX_PATH}, cwd=None, pass_fds=(seccomp_fd,), started=started)
    env = dict(what.env)
    if resolve(command[0], env["PATH"]) is None:
        return COMMAND_NOT_FOUND
    identity = (what.uid, what.gid) if os.geteuid() == 0 else None  # the host command never runs as root
    return spawn(command, env=env, cwd=what.workspace, identity=identity, started=started)


def _container(what: Launch, started: Callable[[subprocess.Popen[bytes]], None], cgroup: SessionCgroup | None) -> int:
    """The command in a container of the engine ``what.sandbox`` names, removed whatever ends it."""
    assert what.image is not None
    name = f"broker-{what.session}"
    with contextlib.ExitStack() as stack:
        network = "host" if what.network == "host" else "none"
        if what.egress_socket is not None:
            relay = Relay(what.relay)
            stack.callback(relay.stop)
            network = f"ns:{relay.namespace}"
        private = stack.enter_context(tempfile.TemporaryDirectory(prefix="broker-exec-"))
        write_private_file(Path(private), "env", env_file_content(what.env), mode=0o600)
        spec = ContainerSpec(
            engine=what.sandbox,
            image=what.image,
            name=name,
            uid=what.uid,
            gid=what.gid,
            secrets_dir=what.secrets_dir,
            mount_path=what.mount_path,
            workspace=what.workspace,
            env_file=f"{private}/env",
            network=network,
            read_only_root=what.read_only_root,
            read_only_binds=tuple(os.path.realpath(path) for path in what.read_only),
            limits=what.limits,
            cgroup_parent=cgroup.parent if cgroup is not None else None,
            options=what.engine,
            program=engine_path(what.sandbox, what.parent_env) or what.sandbox,
        )
        engine = engine_env(what.parent_env)
        argv = run_argv(spec, what.command)
        ended: list[int] = []
        stack.callback(_remove, spec.program, name, engine, ended)
        status = spawn(argv, env=engine, cwd=None, started=started, ended=ended)
    return status


def _remove(program: str | None, name: str, env: dict[str, str], ended: list[int]) -> None:
    """A run whose client was killed (a signal's status) may leave its container: kill and remove it."""
    if program is None or (ended and ended[0] >= 0):
        return  # the run ended with its container (--rm)
    subprocess.run(remove_argv(program, name), env=env, capture_output=True, timeout=60, check=False)


def resolve(program: str, path: str) -> str | None:
    if "/" in program:
        return program if os.access(program, os.X_OK) else None
    return shutil.which(program, path=path)


def spawn(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str | None,
    identity: tuple[int, int] | None = None,
    pass_fds: tuple[int, ...] = (),
    started: Callable[[subprocess.Popen[bytes]], None] | None = None,
    ended: list[int] | None = None,
) -> int:
    """Run ``argv`` to its end (as ``identity`` = (uid, gid) with no other group, when given); its status.
    ``started`` gets the child as soon as it runs (to stop it when its session ends under it); ``ended`` the child's
    own return code (negative: ended by that signal)."""
    drop: dict[str, Any] = {}
    if identity is not None:
        drop = {"user": identity[0], "group": identity[1], "extra_groups": []}
    try:
        child = subprocess.Popen(argv, env=env, cwd=cwd, close_fds=True, pass_fds=pass_fds, **drop)
    except FileNotFoundError:
        return COMMAND_NOT_FOUND
    except PermissionError:
        return NOT_EXECUTABLE
    with forwarding(child):
        if started is not None:
            started(child)
        status = child.wait()
    if ended is not None:
        ended.append(status)
    return 128 - status if status < 0 else status


@contextmanager
def forwarding(child: subprocess.Popen[bytes]) -> Iterator[None]:
    """While the command runs, the launcher's stop signals go to the command instead."""

    def forward(signum: int, frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def stop(child: subprocess.Popen[bytes] | None, grace: float = GRACE) -> None:
    """SIGTERM, and SIGKILL if the command is still there after ``grace`` seconds; returns once it is stopped."""
    if child is None or child.poll() is not None:
        return
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        child.kill()
