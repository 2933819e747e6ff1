"""Running ``exec``'s command: found on its PATH, started as the sandbox user when asked, stop signals forwarded.

``launch`` is the one way direct ``exec`` and the daemon's client both run it:
inside bubblewrap under the seccomp filter (``broker.host.sandbox``,
``broker.host.seccomp``), behind the egress forwarder when there is a proxy,
or on the host, as the sandbox user when the launcher is root.

A shell's statuses: 127 when the command is not there, 126 when it may not
run, 128+N when a signal ended it. While it runs, SIGINT, SIGTERM and SIGHUP
sent to the launcher go to the command instead, so its teardown runs after
the command has ended. A command whose session ends under it is stopped the
one way (``stop``): SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

from broker.host.sandbox import SANDBOX_PATH, SandboxSpec, bwrap_command, extra_binds
from broker.host.seccomp import program_fd

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
COMMAND_NOT_FOUND = 127
NOT_EXECUTABLE = 126
GRACE = 5.0  # seconds between SIGTERM and SIGKILL for a command whose session ended under it


@dataclass(frozen=True)
class Launch:
    """What runs, where: the session's directory, the sandbox user and the sandbox's shape."""

    command: tuple[str, ...]
    sandbox: str  # "bwrap" or "none"
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


def launch(what: Launch, started: Callable[[subprocess.Popen[bytes]], None]) -> int:
    """Run the command to its end; its status as a shell reports it."""
    command = list(what.command)
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
            return spawn(argv, env={"PATH": SANDBOX_PATH}, cwd=None, pass_fds=(seccomp_fd,), started=started)
    env = dict(what.env)
    if resolve(command[0], env["PATH"]) is None:
        return COMMAND_NOT_FOUND
    identity = (what.uid, what.gid) if os.geteuid() == 0 else None  # the host command never runs as root
    return spawn(command, env=env, cwd=what.workspace, identity=identity, started=started)


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
) -> int:
    """Run ``argv`` to its end (as ``identity`` = (uid, gid) with no other group, when given); its status.
    ``started`` gets the child as soon as it runs (to stop it when its session ends under it)."""
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
