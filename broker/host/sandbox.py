"""The bubblewrap command line for ``broker exec --sandbox bwrap``.

Inside: ``/usr`` read-only (``/bin``, ``/lib`` as symlinks), a fresh ``/proc``,
``/dev`` and ``/tmp``, the workspace read-write at ``/workspace``, the session
directory read-only at the manifest's ``mount_path``, extra read-only binds
the launcher names, with an allow-list the egress proxy's socket at
``/run/broker/proxy.sock`` (from the broker's own tmpfs: the sandbox's
``/proc/self/mountinfo`` names nothing of the host for it), and nothing
else: the broker's config, keys, state and other sessions are simply not
there. The environment is cleared to the
values the caller passes. ``--die-with-parent``: the sandbox ends with the
broker.

Who runs inside. As root, ``bwrap --unshare-user --uid N`` maps uid N inside
to uid 0 *outside* (``/proc/self/uid_map`` reads ``N 0 1``): file access is
then checked as root. So as root no user namespace is made; bwrap keeps only
CAP_SETUID, CAP_SETGID, CAP_SETPCAP and CAP_DAC_READ_SEARCH for its first
process, which is ``setpriv --reuid N --regid G --clear-groups
--inh-caps=-all --bounding-set=-all --no-new-privs``: the real host uid N
with no capabilities. A broker that is not root uses a user namespace.
As root, bwrap creates missing parents of mount points 0700; they are made
0755 explicitly so the sandbox user can reach its mounts.

With ``seccomp_fd`` bwrap installs the filter of ``broker.host.seccomp`` (read
from that inherited descriptor) just before it executes the first process,
so setpriv and everything after it run under it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from broker.host.containers.engine import ENGINES, check_image
from broker.host.containers.relay import unshare_path
from broker.host.limits import CONTAINER_KEYS, Limits, check_enforceable
from broker.vocab.errors import BadInput

WORKSPACE = "/workspace"
SETPRIV = "/usr/bin/setpriv"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
BROKER_DIR = "/run/broker"  # the broker's own inside: no manifest's mount_path may be at or below it
EGRESS_SOCKET = f"{BROKER_DIR}/proxy.sock"  # the egress proxy inside, the same for every session
_BASE_DIRS = frozenset({"/", "/usr", "/bin", "/lib", "/lib64", "/proc", "/dev", "/tmp", WORKSPACE})


@dataclass(frozen=True)
class SandboxSpec:
    uid: int
    gid: int
    secrets_dir: str | None
    mount_path: str
    workspace: str | None  # host directory bound read-write at /workspace; a tmpfs when None
    env: Mapping[str, str] = field(default_factory=dict)
    network: bool = False
    read_only_binds: tuple[tuple[str, str], ...] = ()
    egress_socket: str | None = None  # the session's egress proxy (``--network allowlist``), bound at EGRESS_SOCKET


def default_identity() -> str:
    """``setpriv`` when the broker is root, ``userns`` otherwise (see the module docstring)."""
    return "setpriv" if os.geteuid() == 0 else "userns"


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def check_network_enforceable(sandbox: str, network: str | None) -> None:
    """An allow-list only a network namespace can enforce: refused without bubblewrap or podman."""
    if network != "allowlist" or sandbox in ("bwrap", "podman"):
        return
    if sandbox == "docker":
        raise BadInput(
            "--network allowlist with --sandbox docker: docker cannot join the network namespace the broker makes"
            " for the proxy; use --sandbox podman or bwrap"
        )
    raise BadInput("--network allowlist needs --sandbox bwrap or podman: only a network namespace can enforce it")


def check_sandbox_available(
    sandbox: str, network: str | None, image: str | None = None, parent_env: Mapping[str, str] | None = None
) -> None:
    """Refuse before minting anything when the sandbox cannot be built here (direct ``exec`` and its client alike)."""
    check_network_enforceable(sandbox, network)
    if sandbox in ENGINES:
        if os.geteuid() != 0:
            raise BadInput(f"--sandbox {sandbox} runs the engine rootful: run exec as root, or use --sandbox bwrap")
        check_image(sandbox, image, os.environ if parent_env is None else parent_env)
        if network == "allowlist" and unshare_path() is None:
            raise BadInput("unshare is missing (Debian/Ubuntu: apt-get install util-linux)")
        return
    if image is not None:
        raise BadInput("--image is for --sandbox podman or docker")
    if sandbox != "bwrap":
        return
    if bwrap_path() is None:
        raise BadInput("bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
    if os.geteuid() == 0 and not os.path.exists(SETPRIV):
        raise BadInput(f"{SETPRIV} is missing (Debian/Ubuntu: apt-get install util-linux)")


def limits_check(sandbox: str, *, root: bool) -> Callable[[Limits], None]:
    """What refuses a session's limits when this sandbox, run by this launcher, cannot enforce them here (called with
    the decision's limits, before anything is minted)."""

    def check(limits: Limits) -> None:
        if limits.empty:
            return
        if sandbox not in ("bwrap", *ENGINES):
            raise BadInput("sandbox.limits need a sandbox to enforce them: --sandbox bwrap, podman or docker")
        if not root:
            raise BadInput("sandbox.limits need a root launcher (root makes the session's cgroup); run exec as root")
        check_enforceable(limits.only(CONTAINER_KEYS) if sandbox in ENGINES else limits)

    return check


def _parents(dest: str) -> list[str]:
    return [str(parent) for parent in reversed(PurePosixPath(dest).parents)]


def bwrap_command(spec: SandboxSpec, identity: str | None = None, *, seccomp_fd: int | None = None) -> list[str]:
    """The argv prefix of the sandbox; the command to run inside is appended to it."""
    identity = identity or default_identity()
    if identity not in ("setpriv", "userns"):
        raise ValueError(f"unknown identity {identity!r}")
    args = [
        bwrap_path() or "bwrap",
        "--die-with-parent",
        "--new-session",  # no TIOCSTI into the launcher's terminal
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    if not spec.network:
        args.append("--unshare-net")
    if identity == "userns":
        args += ["--unshare-user", "--uid", str(spec.uid), "--gid", str(spec.gid)]
    else:
        args += ["--cap-drop", "ALL"]
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_READ_SEARCH"):
            args += ["--cap-add", cap]
    args += ["--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib"]
    if os.path.isdir("/usr/lib64"):
        args += ["--symlink", "usr/lib64", "/lib64"]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    if spec.workspace is None:
        args += ["--perms", "0777", "--tmpfs", WORKSPACE]
    else:
        args += ["--bind", spec.workspace, WORKSPACE]
    args += ["--chdir", WORKSPACE]
    made = set(_BASE_DIRS)
    binds: list[tuple[str, str, str]] = []
    if spec.secrets_dir is not None:
        binds.append(("--ro-bind", spec.secrets_dir, spec.mount_path))
    binds += [("--ro-bind", src, dest) for src, dest in spec.read_only_binds]
    if spec.egress_socket is not None:
        binds.append(("--bind", spec.egress_socket, EGRESS_SOCKET))
    for option, src, dest in binds:
        for parent in _parents(dest):
            if parent not in made:
                args += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        args += [option, src, dest]
        made.add(dest)
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args.append("--clearenv")
    for key, value in spec.env.items():
        args += ["--setenv", key, value]
    if identity == "setpriv":
        args += [
            SETPRIV,
            f"--reuid={spec.uid}",
            f"--regid={spec.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]
    return args


def extra_binds(paths: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """Host paths bound read-only at the same path inside."""
    return tuple((os.path.realpath(p), os.path.realpath(p)) for p in paths)
