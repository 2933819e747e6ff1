"""``broker exec --sandbox podman|docker --image IMAGE``: the engine's command line, and what is checked first.

The container runs through the engine's own CLI (rootful), one ``run`` per
exec: ``--rm``, named ``broker-<session>`` (so it can be removed whatever
ends the run), never pulling (``--pull=never``: the image must be there),
``--init`` (the engine's small init forwards the stop signals the broker
proxies to the command, which is then not the container's PID 1), as the
manifest's sandbox uid:gid, ``--cap-drop=ALL``, ``no-new-privileges``, a
read-only root file system unless the manifest says ``sandbox.read_only_root:
false``; the session directory bound read-only at its ``mount_path``, the
workspace read-write at ``/workspace`` (a tmpfs without one), the launcher's
``--ro-bind`` paths read-only at the same path. The environment comes from
an env file (``--env-file``, 0600 in a private directory of the launcher's,
removed after the run), so nothing of it is in the engine's argv for ``ps`` to
show; the engine adds ``HOSTNAME`` and ``container`` (podman) of its own.
The network is ``none``, ``host``, or for ``--network allowlist`` the
namespace the broker made (``broker.host.containers.relay``), which podman
joins with ``ns:PATH``; docker has no such mode, and refuses an allow-list
(``check_network``). Resource limits: ``--cpus`` and ``--pids-limit`` are
the engine's flags, memory is the session cgroup's the container is made
under (``--cgroup-parent``; podman with ``--cgroup-manager=cgroupfs``), so
that an OOM kill is seen by the broker (``broker.host.limits``) and not
only by a cgroup the engine removes as the container ends.

The operator's ``[sandbox.podman]`` and ``[sandbox.docker]`` add what the
host needs (``runtime``, ``ulimits``, ``extra_args``), read strictly here:
an extra argument that would undo a guarantee (a capability, a device, a
privileged or host namespace, an unconfined profile, another user, mount
or network) is not among the few it may name.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from broker.host.limits import Limits, cpus_text
from broker.vocab.errors import BadInput, ConfigError
from broker.vocab.fields import Fields, shown

ENGINES = ("podman", "docker")
WORKSPACE = "/workspace"
IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")
RUNTIME = re.compile(r"[A-Za-z0-9._/-]{1,255}")
ULIMIT_NAMES: tuple[str, ...] = ("core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile")
ULIMIT_NAMES += ("nproc", "rss", "rtprio", "rttime", "sigpending", "stack")
ULIMIT = re.compile(rf"({'|'.join(ULIMIT_NAMES)})=(-1|[0-9]{{1,19}})(:(-1|[0-9]{{1,19}}))?")
#: ``extra_args``: ``--NAME=VALUE`` with NAME among these only (none can widen what the container reaches).
EXTRA_OPTIONS = frozenset(
    {"annotation", "hostname", "init-path", "label", "log-driver", "log-opt", "security-opt", "shm-size"}
)
EXTRA_ARG = re.compile(r"--([a-z][a-z-]{0,31})=([\x21-\x7e]{1,512})")
#: ``security-opt`` values an operator may add: a profile of its own, never an unconfined one.
SECURITY_OPT = re.compile(r"(seccomp|apparmor)=(?!unconfined$)[A-Za-z0-9._/-]{1,255}|label=(type|level):[\w.:-]{1,128}")
PASSED_TO_ENGINE = ("HOME", "XDG_RUNTIME_DIR", "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "CONTAINER_HOST")
ENGINE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CHECK_TIMEOUT = 30.0


@dataclass(frozen=True)
class EngineOptions:
    """``[sandbox.podman]`` or ``[sandbox.docker]``: what this host's engine needs on every run."""

    runtime: str | None = None  # --runtime (this host: runc)
    ulimits: tuple[str, ...] = ()  # --ulimit NAME=SOFT[:HARD] each
    extra_args: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        """As the config writes it: the keys set only."""
        document: dict[str, object] = {"runtime": self.runtime} if self.runtime is not None else {}
        if self.ulimits:
            document["ulimits"] = list(self.ulimits)
        if self.extra_args:
            document["extra_args"] = list(self.extra_args)
        return document

    @classmethod
    def from_json(cls, data: Mapping[str, object] | None, engine: str) -> EngineOptions:
        """The options as a daemon hands them to its thin client: checked again, as the config is."""
        if engine not in ENGINES:
            return NO_OPTIONS
        return read_engine_options(Fields(data or {}, f"sandbox.{engine}", ConfigError))


NO_OPTIONS = EngineOptions()


def read_engine_options(fields: Fields) -> EngineOptions:
    runtime = fields.string("runtime", required=False, pattern=RUNTIME, hint="a runtime name or an absolute path")
    ulimits = fields.string_list(
        "ulimits", required=False, pattern=ULIMIT, max_items=16, hint="NAME=SOFT[:HARD], e.g. nofile=1024:1024"
    )
    extra = fields.string_list("extra_args", required=False, max_items=32, max_len=600) or ()
    for index, arg in enumerate(extra):
        match = EXTRA_ARG.fullmatch(arg)
        where = f"extra_args[{index}]"
        if match is None:
            raise fields.fail(where, f"{shown(arg)} is not --NAME=VALUE")
        if match.group(1) not in EXTRA_OPTIONS:
            allowed = ", ".join(sorted(EXTRA_OPTIONS))
            raise fields.fail(where, f"--{match.group(1)} is not one the broker passes on (only {allowed})")
        if match.group(1) == "security-opt" and not SECURITY_OPT.fullmatch(match.group(2)):
            raise fields.fail(where, "a security-opt here names a seccomp or apparmor profile or an SELinux type/level")
    fields.done()
    return EngineOptions(runtime, ulimits or (), tuple(extra))


def read_engines(fields: Fields | None) -> dict[str, EngineOptions]:
    """``[sandbox]``: a table per engine (``podman``, ``docker``), each optional."""
    if fields is None:
        return {}
    engines = {}
    for engine in ENGINES:
        table = fields.mapping(engine, required=False)
        if table is not None:
            engines[engine] = read_engine_options(table)
    fields.done()
    return engines


@dataclass(frozen=True)
class ContainerSpec:
    """One container run: who, what, where; ``network`` is none, host or ``ns:PATH``."""

    engine: str
    image: str
    name: str
    uid: int
    gid: int
    secrets_dir: str
    mount_path: str
    workspace: str | None
    env_file: str
    network: str
    read_only_root: bool = True
    read_only_binds: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)  # cpus and pids as flags; memory is the cgroup parent's
    cgroup_parent: str | None = None
    options: EngineOptions = NO_OPTIONS
    program: str | None = None  # the engine's CLI; None: found on the usual system PATH


def engine_path(engine: str, parent: Mapping[str, str] | None = None) -> str | None:
    """The engine's CLI on the launcher's PATH (the usual system directories when it has none)."""
    return shutil.which(engine, path=(parent or {}).get("PATH") or ENGINE_PATH)


def run_argv(spec: ContainerSpec, command: Sequence[str]) -> list[str]:
    """The engine's ``run`` command line for ``command`` in ``spec``'s container."""
    args = [spec.program or engine_path(spec.engine) or spec.engine]
    if spec.engine == "podman" and spec.cgroup_parent is not None:
        args.append("--cgroup-manager=cgroupfs")  # a cgroup parent named by its path
    args += ["run", "--rm", "--interactive", f"--name={spec.name}", "--pull=never", "--init"]
    args += [f"--user={spec.uid}:{spec.gid}", "--cap-drop=ALL", "--security-opt=no-new-privileges"]
    if spec.read_only_root:
        args.append("--read-only")
    args += [f"--network={spec.network}", f"--env-file={spec.env_file}"]
    args += ["--volume", _bind(spec.secrets_dir, spec.mount_path, "ro")]
    if spec.workspace is not None:
        args += ["--volume", _bind(spec.workspace, WORKSPACE, "rw")]
    else:
        args += [f"--tmpfs={WORKSPACE}:rw,mode=1777"]
    for path in spec.read_only_binds:
        args += ["--volume", _bind(path, path, "ro")]
    args.append(f"--workdir={WORKSPACE}")
    options = spec.options
    if options.runtime is not None:
        args.append(f"--runtime={options.runtime}")
    args += [f"--ulimit={ulimit}" for ulimit in options.ulimits]
    if spec.limits.cpus is not None:
        args.append(f"--cpus={cpus_text(spec.limits.cpus)}")
    if spec.limits.pids is not None:
        args.append(f"--pids-limit={spec.limits.pids}")
    if spec.cgroup_parent is not None:
        args.append(f"--cgroup-parent={spec.cgroup_parent}")
    args += list(options.extra_args)
    args += [spec.image, *command]  # an image never starts with '-' (IMAGE)
    return args


def remove_argv(program: str, name: str) -> list[str]:
    """Kill and remove the container, whatever state it is in (the run's client was killed)."""
    return [program, "rm", "--force", name]


def remove_session_containers(session: str) -> None:
    """A killed launcher's container (``broker-<session>``), with every engine installed here (``broker sweep``)."""
    for engine in ENGINES:
        program = engine_path(engine)
        if program is not None:
            try:
                subprocess.run(
                    remove_argv(program, f"broker-{session}"),
                    env=engine_env({}),
                    capture_output=True,
                    timeout=CHECK_TIMEOUT,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                continue


def env_file_content(env: Mapping[str, str]) -> bytes:
    lines = []
    for key, value in env.items():
        if "\n" in key or "\n" in value or "=" in key:
            raise BadInput(f"the environment variable {shown(key)} cannot be put in a container's env file")
        lines.append(f"{key}={value}\n")
    return "".join(lines).encode()


def engine_env(parent: Mapping[str, str]) -> dict[str, str]:
    """What the engine's CLI itself runs with (nothing of it reaches the container)."""
    return {"PATH": ENGINE_PATH, **{name: parent[name] for name in PASSED_TO_ENGINE if name in parent}}


def _bind(source: str, target: str, mode: str) -> str:
    for path in (source, target):
        if ":" in path or "," in path:
            raise BadInput(f"{shown(path)}: a path holding ':' or ',' cannot be bound into a container")
    return f"{source}:{target}:{mode}"


def check_image(engine: str, image: str | None, parent: Mapping[str, str]) -> None:
    """Before anything is minted: a known engine, installed, answering, and the image there (exec never pulls)."""
    if engine not in ENGINES:
        raise BadInput(f"unknown sandbox {shown(engine)}: bwrap, podman, docker or none")
    if image is None:
        raise BadInput(f"--sandbox {engine} needs --image IMAGE (an image {engine} has: {engine} images lists them)")
    if not IMAGE.fullmatch(image):
        raise BadInput(f"--image {shown(image)} is not an image reference (name[:tag] or name@sha256:...)")
    path = engine_path(engine, parent)
    if path is None:
        fix = "apt-get install podman runc" if engine == "podman" else "install Docker Engine"
        raise BadInput(f"{engine} is not installed ({fix}), or use --sandbox bwrap")
    try:
        found = subprocess.run(
            [path, "image", "inspect", "--format", "{{.Id}}", image],
            capture_output=True,
            text=True,
            env=engine_env(parent),
            timeout=CHECK_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise BadInput(f"{engine} did not answer within {CHECK_TIMEOUT:.0f}s; check its engine") from None
    if found.returncode == 0:
        return
    said = " ".join(found.stderr.split())[:200]
    if re.search(r"image not known|no such image", said, re.IGNORECASE):
        raise BadInput(
            f"{engine} has no image {shown(image)}; {engine} pull, load or import it first (exec never pulls)"
        )
    raise BadInput(f"{engine} does not answer ({said or 'exit ' + str(found.returncode)}); start its engine")
