"""The limits' value as documents carry it, the cgroup hierarchies as the host mounts them, and the lines exec
prints for a limit gone past."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.host.limits import Limits, _placing, hierarchies, limit_notes
from broker.vocab.errors import BadInput

pytestmark = pytest.mark.unit

HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup2 {unified} cgroup2 rw,relatime 0 0
"""


def test_limits_travel_as_json_and_back() -> None:
    limits = Limits(memory=256 << 20, cpus=1500, pids=64)
    assert limits.to_json() == {"memory": 256 << 20, "cpus": 1.5, "pids": 64}
    assert Limits.from_json(limits.to_json()) == limits
    assert Limits(cpus=2000).to_json() == {"cpus": 2}
    assert Limits.from_json(None).empty
    assert (limits.shown("memory"), limits.shown("cpus"), limits.shown("pids")) == ("256MiB", "1.5", "64")


def test_a_hybrid_host_enforces_with_its_v1_controllers(tmp_path: Path) -> None:
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("")  # systemd's v2 beside v1: no controller of its own
    mounts = tmp_path / "mounts"
    mounts.write_text(HYBRID.format(unified=unified))
    found = hierarchies(mounts)
    placed = _placing(Limits(memory=1 << 30, cpus=1000, pids=64), found)
    assert {key: (str(h.path), h.version) for key, h in placed.items()} == {
        "memory": ("/sys/fs/cgroup/memory", 1),
        "cpus": ("/sys/fs/cgroup/cpu", 1),
        "pids": ("/sys/fs/cgroup/pids", 1),
    }


def test_a_v2_host_enforces_with_what_its_hierarchy_offers(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"cgroup2 {tmp_path} cgroup2 rw 0 0\n")
    placed = _placing(Limits(memory=1 << 30, pids=64), hierarchies(mounts))
    assert {h.version for h in placed.values()} == {2}


def test_a_controller_the_host_lacks_is_named_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"cgroup2 {tmp_path} cgroup2 rw 0 0\n")
    with pytest.raises(BadInput) as refused:
        _placing(Limits(pids=64), hierarchies(mounts))
    assert refused.value.message.startswith("sandbox.limits.pids: this host has no pids cgroup controller mounted;")


def test_the_lines_name_the_limit_gone_past() -> None:
    limits = Limits(memory=256 << 20, pids=64)
    assert limit_notes(("memory", "pids"), 137, limits) == (
        "the command was killed: it went past sandbox.limits.memory (256MiB)",
        "a process of the command could not fork: it reached sandbox.limits.pids (64)",
    )
    assert limit_notes(("memory",), 1, limits) == (
        "a process of the command was killed: it went past sandbox.limits.memory (256MiB)",
    )
