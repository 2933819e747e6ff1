"""The egress proxy's socket: made in the broker's own directory, with its final owner and mode, no link followed."""

from __future__ import annotations

import multiprocessing
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.host import mounts
from broker.host.egress_socket import EGRESS_DIR, EgressSocket, egress_root
from broker.host.sessiondir import RuntimeDir, prepare_runtime_dir
from broker.vocab.errors import RuntimeDirError, UsageError
from tests.fixtures.brokerenv import BrokerEnv

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts, chown)")
STRANGER = 59123  # no account on the host


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[RuntimeDir]:
    prepared = prepare_runtime_dir(tmp_path / "run", "auto")
    try:
        yield prepared
    finally:
        egress = prepared.path / EGRESS_DIR
        if mounts.is_mount_point(egress):
            mounts.unmount(egress)


def _shape(path: Path) -> tuple[int, int, int, bool]:
    info = os.lstat(path)
    return stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid, stat.S_ISSOCK(info.st_mode)


@root_only
def test_a_launchers_socket_is_its_own_in_a_directory_of_the_brokers(runtime: RuntimeDir) -> None:
    root = egress_root(runtime)
    assert mounts.is_mount_point(root) and mounts.is_tmpfs(root)  # the mountinfo of a sandbox: "/s-.../proxy.sock"
    assert _shape(root) == (0o711, 0, 0, False)
    passable = EgressSocket(root, "s-aaaaaaaaaaaa", (STRANGER, STRANGER), passable=True)
    private = EgressSocket(root, "s-bbbbbbbbbbbb", (1000, 1000), passable=False)
    try:
        assert passable.path == root / "s-aaaaaaaaaaaa" / "proxy.sock"
        assert _shape(passable.path) == (0o600, STRANGER, STRANGER, True)
        assert _shape(passable.path.parent) == (0o711, 0, 0, False)  # passed through, never written, by the peer
        assert _shape(private.path) == (0o600, 1000, 1000, True)
        assert _shape(private.path.parent) == (0o700, 0, 0, False)  # only bwrap, run by root, binds it in
    finally:
        passable.remove()
        private.remove()
    assert os.listdir(root) == []
    passable.remove()  # again: nothing to do


@root_only
@pytest.mark.parametrize("planted", ["link", "foreign"])
def test_an_egress_directory_planted_in_the_runtime_dir_is_refused(runtime: RuntimeDir, planted: str) -> None:
    elsewhere = runtime.path.parent / "elsewhere"
    elsewhere.mkdir(mode=0o777)
    elsewhere.chmod(0o777)
    if planted == "link":
        (runtime.path / EGRESS_DIR).symlink_to(elsewhere)
    else:
        (runtime.path / EGRESS_DIR).mkdir()
        os.chown(runtime.path / EGRESS_DIR, STRANGER, STRANGER)
    with pytest.raises(RuntimeDirError, match=r"\.egress"):
        egress_root(runtime)
    assert _shape(elsewhere) == (0o777, 0, 0, False) and os.listdir(elsewhere) == []
    assert not mounts.is_mount_point(runtime.path / EGRESS_DIR)


def test_a_session_name_that_is_not_a_session_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a session id"):
        EgressSocket(tmp_path, "../x", None, passable=False)
    assert os.listdir(tmp_path) == []


@root_only
def test_brokers_starting_together_mount_one_egress_tmpfs(tmp_path: Path) -> None:
    """Brokers (processes) making their first proxy socket at once: one tmpfs, since a second one stacked on the
    first would hide the sockets already made in it. Ten rounds of eight brokers."""
    fork = multiprocessing.get_context("fork")
    counts = []
    for round_ in range(10):
        runtime = prepare_runtime_dir(tmp_path / f"run{round_}", "auto")
        start = fork.Barrier(8)

        def first_exec(runtime: RuntimeDir = runtime, start: Any = start) -> None:
            start.wait()
            egress_root(runtime)

        brokers = [fork.Process(target=first_exec) for _ in range(8)]
        for broker in brokers:
            broker.start()
        for broker in brokers:
            broker.join(30)
        assert [broker.exitcode for broker in brokers] == [0] * 8
        point = str(runtime.path / EGRESS_DIR)
        counts.append(
            [line.split(" ")[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()].count(point)
        )
        while mounts.is_mount_point(Path(point)):
            mounts.unmount(Path(point))
    assert counts == [1] * 10


@pytest.mark.root
def test_sweep_leaves_the_egress_directory_alone_and_removes_what_a_killed_broker_left_in_it(
    broker_env: BrokerEnv,
) -> None:
    """``.egress`` is the broker's own, never a foreign entry of runtime_dir; a socket no live session owns
    (its broker was killed before it could remove it) goes with the next sweep."""
    broker_env.runtime_dir.mkdir(mode=0o711)
    prepared = prepare_runtime_dir(broker_env.runtime_dir, "auto")
    root = egress_root(prepared)
    left = EgressSocket(root, "s-deadbroker001", (59123, 59123), passable=True)
    left.listener.close()  # the broker that made it is gone
    try:
        result = broker_env.run("sweep", "--json")
        assert result.code == 0, result.stderr
        assert EGRESS_DIR not in result.json()["foreign"]
        assert not (root / "s-deadbroker001").exists() and root.is_dir()
    finally:
        if mounts.is_mount_point(root):
            mounts.unmount(root)
