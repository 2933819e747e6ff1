"""Resource limits of a sandbox: the value, and the session's own cgroup that enforces them.

``Limits`` is what a session may use (``sandbox.limits``, capped by its rule's
``limits``: ``broker.core.inputs.limits``): memory in bytes, CPUs in
thousandths, processes. ``SessionCgroup`` makes a cgroup for one session,
``broker/<session>`` at the top of each hierarchy that holds a controller it
needs, on cgroups v2 (one hierarchy: the controllers enabled in
``cgroup.subtree_control`` down to it) or v1 (a hierarchy per controller,
found in ``/proc/self/mounts``: a hybrid host such as one with systemd's
``unified`` beside v1 controllers uses v1 for them). It writes the limits
(memory with no swap beyond it, the CPU quota over a 100 ms period, the
process count), and the launcher puts the sandbox in it before it runs
anything: bubblewrap's first process enters it (``enter_argv``), a container
is made under it (the engine's ``--cgroup-parent``).

Past memory the kernel's OOM killer ends a process; past the process count
``fork`` fails with EAGAIN. Both are read back at the end (``went_past``):
on v1 the OOM is an eventfd registered on ``memory.oom_control`` when the
cgroup is made (it fires for an OOM anywhere below, which the ``oom_kill``
counter of a child the engine removes would not show), on v2
``memory.events``' ``oom_kill``; a refused fork is ``pids.events``' ``max``.
``remove`` kills what is left and removes the cgroup and everything an engine
made under it, in every hierarchy. ``check_enforceable`` refuses, before
anything is minted, limits this host cannot enforce (not root, a controller
missing or read-only).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from broker.vocab.errors import BadInput
from broker.vocab.sizes import format_size

MOUNTS = Path("/proc/self/mounts")
TOP = "broker"  # the sessions' cgroups: TOP/<session> at the top of each hierarchy
PERIOD = 100_000  # microseconds: the CPU quota's period
CONTROLLERS = {"memory": "memory", "cpus": "cpu", "pids": "pids"}  # a limit's key -> the controller enforcing it
CONTAINER_KEYS = ("memory",)  # what a container's cgroup parent enforces; its engine's flags do the rest
REMOVE_TRIES = 50  # 5 s for the last processes of a sandbox to go


@dataclass(frozen=True)
class Limits:
    """What a session's sandbox may use; None: not limited."""

    memory: int | None = None  # bytes
    cpus: int | None = None  # thousandths of a CPU
    pids: int | None = None

    @property
    def empty(self) -> bool:
        return self.memory is None and self.cpus is None and self.pids is None

    def named(self) -> tuple[str, ...]:
        """The keys that are limited."""
        return tuple(f.name for f in fields(self) if getattr(self, f.name) is not None)

    def only(self, keys: Iterable[str]) -> Limits:
        wanted = set(keys)
        return Limits(**{key: getattr(self, key) if key in wanted else None for key in CONTROLLERS})

    def shown(self, key: str) -> str:
        """A limit as the manifest writes it: ``256MiB``, ``1.5``, ``512``."""
        value = getattr(self, key)
        if key == "memory":
            return format_size(value)
        if key == "cpus":
            return cpus_text(value)
        return str(value)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {}
        if self.memory is not None:
            document["memory"] = self.memory
        if self.cpus is not None:
            document["cpus"] = self.cpus / 1000 if self.cpus % 1000 else self.cpus // 1000
        if self.pids is not None:
            document["pids"] = self.pids
        return document

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Limits:
        if not data:
            return NO_LIMITS
        cpus = data.get("cpus")
        return cls(
            memory=_whole(data.get("memory")),
            cpus=round(float(cpus) * 1000) if isinstance(cpus, int | float) and not isinstance(cpus, bool) else None,
            pids=_whole(data.get("pids")),
        )


NO_LIMITS = Limits()


def cpus_text(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis / 1000:g}"


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class Hierarchy:
    """One mounted cgroup hierarchy: v1 with its controllers, or v2 with those it offers."""

    path: Path
    version: int
    controllers: frozenset[str]


def hierarchies(mounts: Path = MOUNTS) -> list[Hierarchy]:
    """The cgroup hierarchies mounted here, as ``/proc/self/mounts`` lists them."""
    found: list[Hierarchy] = []
    for line in mounts.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        path = Path(parts[1].replace("\\040", " "))
        if parts[2] == "cgroup":
            found.append(Hierarchy(path, 1, frozenset(parts[3].split(","))))
        elif parts[2] == "cgroup2":
            try:
                offered = (path / "cgroup.controllers").read_text(encoding="ascii").split()
            except OSError:
                offered = []
            found.append(Hierarchy(path, 2, frozenset(offered)))
    return found


def _placing(limits: Limits, mounted: list[Hierarchy]) -> dict[str, Hierarchy]:
    """The hierarchy enforcing each limit: a v1 one with its controller, else a v2 one offering it."""
    placed: dict[str, Hierarchy] = {}
    for key in limits.named():
        controller = CONTROLLERS[key]
        holding = [h for h in mounted if controller in h.controllers]
        chosen = next((h for h in holding if h.version == 1), holding[0] if holding else None)
        if chosen is None:
            raise BadInput(
                f"sandbox.limits.{key}: this host has no {controller} cgroup controller mounted; mount it"
                " (cgroups v2, or v1 at /sys/fs/cgroup/{controller}) or run without limits"
            )
        placed[key] = chosen
    return placed


def check_enforceable(limits: Limits, mounts: Path = MOUNTS) -> None:
    """Refuse limits this host cannot enforce (before anything is minted): a launcher that is not root, a
    controller that is not there, a hierarchy the broker cannot write."""
    if limits.empty:
        return
    if os.geteuid() != 0:
        raise BadInput("sandbox.limits need a root launcher (root makes the session's cgroup); run exec as root")
    for key, hierarchy in _placing(limits, hierarchies(mounts)).items():
        if not os.access(hierarchy.path, os.W_OK):
            raise BadInput(
                f"sandbox.limits.{key}: the cgroup hierarchy {hierarchy.path} is read-only here;"
                " run the broker where it can make cgroups, or without limits"
            )


class SessionCgroup:
    """``broker/<name>`` in each hierarchy the limits need, with the limits written; ``remove`` once done."""

    def __init__(self, name: str, limits: Limits, mounts: Path = MOUNTS) -> None:
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"bad cgroup name {name!r}")
        self.name = name
        self.limits = limits
        self.mounted = hierarchies(mounts)
        self.placed = _placing(limits, self.mounted)
        self._oom_event: int | None = None
        self.paths: list[Path] = []
        try:
            for hierarchy in dict.fromkeys(self.placed.values()):
                self.paths.append(self._make(hierarchy))
            for key, hierarchy in self.placed.items():
                self._write(key, hierarchy, self._path(hierarchy))
        except OSError as exc:
            self.remove()
            raise BadInput(f"cannot make the session's cgroup ({exc.strerror or exc}); run without limits") from None

    @property
    def parent(self) -> str:
        """The cgroup as an engine's ``--cgroup-parent`` names it (a path from each hierarchy's top)."""
        return f"/{TOP}/{self.name}"

    def enter_argv(self) -> list[str]:
        """An argv prefix that puts its process in the cgroup, then executes the rest (``-- ARGV``)."""
        script = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
        return ["/bin/sh", "-c", script, "sh", *(str(path / "cgroup.procs") for path in self.paths), "--"]

    def went_past(self) -> tuple[str, ...]:
        """The limits a process of the sandbox went past: ``memory`` (the OOM killer ended one), ``pids`` (a fork
        was refused)."""
        past = []
        if "memory" in self.placed and self._oom_killed(self.placed["memory"]):
            past.append("memory")
        if "pids" in self.placed and _counter(self._path(self.placed["pids"]) / "pids.events", "max"):
            past.append("pids")
        return tuple(past)

    def remove(self) -> None:
        """Kill what is left in it, then remove it and whatever an engine made below it, in every hierarchy."""
        if self._oom_event is not None:
            os.close(self._oom_event)
            self._oom_event = None
        remove_session_cgroup(self.name, self.mounted)

    def _path(self, hierarchy: Hierarchy) -> Path:
        return hierarchy.path / TOP / self.name

    def _make(self, hierarchy: Hierarchy) -> Path:
        top = hierarchy.path / TOP
        with contextlib.suppress(FileExistsError):
            top.mkdir(mode=0o755)
        if hierarchy.version == 2:
            wanted = {CONTROLLERS[key] for key, h in self.placed.items() if h == hierarchy}
            for level in (hierarchy.path, top):
                _enable(level, wanted)
        path = self._path(hierarchy)
        path.mkdir(mode=0o755)
        if hierarchy.version == 1 and self.placed.get("memory") == hierarchy:
            self._oom_event = _oom_eventfd(path)
        return path

    def _write(self, key: str, hierarchy: Hierarchy, path: Path) -> None:
        limits, v1 = self.limits, hierarchy.version == 1
        if key == "memory":
            assert limits.memory is not None
            if v1:
                _put(path / "memory.limit_in_bytes", limits.memory)
                if (path / "memory.memsw.limit_in_bytes").exists():  # swap accounting: no swap beyond the limit
                    _put(path / "memory.memsw.limit_in_bytes", limits.memory)
            else:
                _put(path / "memory.max", limits.memory)
                if (path / "memory.swap.max").exists():
                    _put(path / "memory.swap.max", 0)
        elif key == "cpus":
            assert limits.cpus is not None
            quota = max(1000, limits.cpus * PERIOD // 1000)
            if v1:
                _put(path / "cpu.cfs_period_us", PERIOD)
                _put(path / "cpu.cfs_quota_us", quota)
            else:
                _put(path / "cpu.max", f"{quota} {PERIOD}")
        elif key == "pids":
            _put(path / "pids.max", limits.pids)

    def _oom_killed(self, hierarchy: Hierarchy) -> bool:
        if hierarchy.version == 2:
            return bool(_counter(self._path(hierarchy) / "memory.events", "oom_kill"))
        if self._oom_event is None:
            return False
        try:
            return os.eventfd_read(self._oom_event) > 0
        except BlockingIOError:
            return False


def remove_session_cgroup(name: str, mounted: list[Hierarchy] | None = None) -> None:
    """``broker/<name>`` and everything below it, in every hierarchy, its processes killed (what a killed launcher
    left: ``broker sweep``)."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"bad cgroup name {name!r}")
    for hierarchy in hierarchies() if mounted is None else mounted:
        top = hierarchy.path / TOP / name
        for _ in range(REMOVE_TRIES):
            if _remove_tree(top):
                break
            time.sleep(0.1)


def _put(path: Path, value: object) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, f"{value}\n".encode())
    finally:
        os.close(fd)


def _enable(level: Path, controllers: set[str]) -> None:
    """v2: the controllers made available to the cgroups below ``level``."""
    enabled = set((level / "cgroup.subtree_control").read_text(encoding="ascii").split())
    missing = sorted(controllers - enabled)
    if missing:
        _put(level / "cgroup.subtree_control", " ".join(f"+{name}" for name in missing))


def _oom_eventfd(path: Path) -> int:
    """v1: an eventfd the kernel signals when an OOM happens in the cgroup or below it."""
    event = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    control = os.open(path / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _put(path / "cgroup.event_control", f"{event} {control}")
    except OSError:
        os.close(event)
        raise
    finally:
        os.close(control)
    return event


def _counter(path: Path, name: str) -> int:
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except OSError:
        return 0
    for line in lines:
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value)
    return 0


def _remove_tree(top: Path) -> bool:
    """Remove ``top`` and the cgroups below it, deepest first, killing any process left; True once gone."""
    if not top.is_dir():
        return True
    below = sorted((Path(root) for root, _, _ in os.walk(top)), key=lambda p: len(p.parts), reverse=True)
    for path in below:
        for pid in _procs(path):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            path.rmdir()
    return not top.exists()


def _procs(path: Path) -> list[int]:
    try:
        return [int(line) for line in (path / "cgroup.procs").read_text(encoding="ascii").split()]
    except (OSError, ValueError):
        return []


def limit_notes(past: Iterable[str], status: int, limits: Limits) -> tuple[str, ...]:
    """One line for each limit the command went past, naming it (exec prints them after the command)."""
    notes = []
    for key in past:
        if key == "memory":
            who = "the command was killed" if status == 128 + signal.SIGKILL else "a process of the command was killed"
            notes.append(f"{who}: it went past sandbox.limits.memory ({limits.shown('memory')})")
        elif key == "pids" and limits.pids is not None:
            notes.append(f"a process of the command could not fork: it reached sandbox.limits.pids ({limits.pids})")
    return tuple(notes)
