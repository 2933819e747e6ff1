"""Session directories: tmpfs only, sandbox-owned, sealed modes, atomic writes, no symlink games."""

from __future__ import annotations

import logging
import os
import platform
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.host import mounts
from broker.host.sessiondir import RuntimeDir, SessionDirectory, prepare_runtime_dir, remove_session_path
from broker.vocab.errors import RuntimeDirError
from broker.vocab.secret import Secret

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts, chown)")


@pytest.fixture
def shm_dir(tmp_path: Path) -> Iterator[Path]:
    """A runtime dir on the host's /dev/shm tmpfs, for the no-mount mode."""
    path = Path("/dev/shm") / f"broker-test-{tmp_path.name}"
    yield path
    if path.exists():
        for child in list(path.iterdir()):
            remove_session_path(path, child.name)
        path.rmdir()


@root_only
def test_each_session_gets_its_own_tmpfs(tmp_path: Path) -> None:
    runtime = prepare_runtime_dir(tmp_path / "run", "auto")
    assert runtime.mount_per_session
    directory = SessionDirectory(runtime, "s-aaaaaaaaaaaa", 1000, 1000)
    directory.create()
    try:
        assert mounts.is_mount_point(directory.path) and mounts.is_tmpfs(directory.path)
        directory.write_credential("kv", {"token": Secret("t0k3n"), "note": "plain"})
        directory.seal()
        for path, mode in [
            (directory.path, 0o500),
            (directory.path / "kv", 0o500),
            (directory.path / "kv" / "token", 0o400),
        ]:
            info = os.lstat(path)
            assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (mode, 1000, 1000)
    finally:
        assert directory.remove()
    assert not directory.path.exists() and not mounts.is_mount_point(directory.path)


def test_without_mounting_the_runtime_dir_must_be_tmpfs(tmp_path: Path) -> None:
    disk = tmp_path / "run"
    with pytest.raises(RuntimeDirError, match="is not on tmpfs"):
        prepare_runtime_dir(disk, "never")


def test_without_mounting_a_tmpfs_runtime_dir_works(shm_dir: Path) -> None:
    runtime = prepare_runtime_dir(shm_dir, "never")
    assert not runtime.mount_per_session
    directory = SessionDirectory(runtime, "s-bbbbbbbbbbbb", os.getuid(), os.getgid())
    directory.create()
    directory.write_credential("kv", {"token": Secret("abc")})
    directory.seal()
    assert (directory.path / "kv" / "token").read_text() == "abc"
    assert directory.remove() and not directory.path.exists()


def test_a_symlinked_runtime_dir_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o711)
    link = tmp_path / "run"
    link.symlink_to(target)
    with pytest.raises(RuntimeDirError, match="is a symbolic link"):
        prepare_runtime_dir(link, "auto")


def test_a_world_writable_runtime_dir_or_parent_is_refused(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    with pytest.raises(RuntimeDirError, match="writable by group or others"):
        prepare_runtime_dir(loose, "auto")
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)
    with pytest.raises(RuntimeDirError, match="is world-writable"):
        prepare_runtime_dir(parent / "run", "auto")


@root_only
def test_a_precreated_symlink_at_the_session_path_is_refused(tmp_path: Path) -> None:
    runtime = prepare_runtime_dir(tmp_path / "run", "auto")
    victim = tmp_path / "victim"
    victim.mkdir()
    (runtime.path / "s-cccccccccccc").symlink_to(victim)
    directory = SessionDirectory(runtime, "s-cccccccccccc", 1000, 1000)
    with pytest.raises(RuntimeDirError, match="already exists"):
        directory.create()
    assert list(victim.iterdir()) == []


def test_a_symlink_planted_at_a_file_name_is_not_followed(shm_dir: Path) -> None:
    runtime = prepare_runtime_dir(shm_dir, "never")
    directory = SessionDirectory(runtime, "s-dddddddddddd", os.getuid(), os.getgid())
    directory.create()
    outside = shm_dir.parent / f"{shm_dir.name}-outside"
    outside.write_text("untouched")
    try:
        (directory.path / "kv").mkdir(mode=0o700)
        (directory.path / "kv" / "token").symlink_to(outside)
        directory.write_credential("kv", {"token": Secret("new")})
        assert outside.read_text() == "untouched"  # the rename replaced the link, never wrote through it
        assert not (directory.path / "kv" / "token").is_symlink()
        (directory.path / "kv2").symlink_to(outside.parent)
        with pytest.raises(NotADirectoryError):
            directory.write_credential("kv2", {"token": Secret("x")})
    finally:
        outside.unlink()
        directory.remove()


def test_readers_never_see_a_partial_file(shm_dir: Path) -> None:
    runtime = prepare_runtime_dir(shm_dir, "never")
    directory = SessionDirectory(runtime, "s-eeeeeeeeeeee", os.getuid(), os.getgid())
    directory.create()
    big = [Secret(chr(ord("a") + i) * 200_000) for i in range(4)]
    directory.write_credential("kv", {"token": big[0]})
    seen: set[int] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            data = (directory.path / "kv" / "token").read_bytes()
            seen.add(len(data))
            assert len(set(data)) == 1

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(20):
            for secret in big:
                directory.write_credential("kv", {"token": secret})
    finally:
        stop.set()
        thread.join()
        directory.remove()
    assert seen == {200_000}


def test_remove_is_idempotent_and_leaves_nothing(tmp_path: Path) -> None:
    runtime = RuntimeDir(path=tmp_path, mount_per_session=False)
    (tmp_path / "s-ffffffffffff" / "kv").mkdir(parents=True)
    (tmp_path / "s-ffffffffffff" / "kv" / "token").write_text("x")
    os.chmod(tmp_path / "s-ffffffffffff" / "kv", 0o500)
    os.chmod(tmp_path / "s-ffffffffffff", 0o500)
    assert remove_session_path(runtime.path, "s-ffffffffffff")
    assert remove_session_path(runtime.path, "s-ffffffffffff")
    assert list(tmp_path.iterdir()) == []


def kernel_tmpfs_takes_noswap(tmp_path: Path) -> bool:
    """Asked the plain way, with mount(8): does this kernel's tmpfs accept ``noswap`` (Linux 6.4+)?"""
    probe = tmp_path / "noswap-probe"
    probe.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,noswap", "tmpfs", str(probe)], check=False)
    if result.returncode == 0:
        subprocess.run(["umount", str(probe)], check=True)
    return result.returncode == 0


@root_only
def test_the_session_tmpfs_is_mounted_noswap_where_the_kernel_has_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Secrets on a session tmpfs must never be written to a swap device."""
    supported = kernel_tmpfs_takes_noswap(tmp_path)
    runtime = prepare_runtime_dir(tmp_path / "run", "auto")
    directory = SessionDirectory(runtime, "s-bbbbbbbbbbbb", 1000, 1000)
    with caplog.at_level(logging.INFO, logger="broker.sessiondir"):
        directory.create()
    try:
        options = mounts.super_options(directory.path)
        assert "size=4096k" in options, options
        assert ("noswap" in options) is supported, (platform.release(), options)
        assert mounts.tmpfs_accepts("noswap") is supported
        [record] = [r for r in caplog.records if r.name == "broker.sessiondir"]
        assert record.broker_fields == {"session": "s-bbbbbbbbbbbb", "noswap": supported}  # type: ignore[attr-defined]
    finally:
        assert directory.remove()


@root_only
def test_an_option_the_kernel_refuses_is_dropped_and_reported(tmp_path: Path) -> None:
    """The fallback an older kernel takes for noswap: EINVAL, then the same mount without the option."""
    target = tmp_path / "mnt"
    target.mkdir()
    assert mounts.tmpfs_accepts("no-such-tmpfs-option") is False
    accepted = mounts.mount_tmpfs(target, size="64k", mode=0o700, uid=0, gid=0, preferred=("no-such-tmpfs-option",))
    try:
        assert accepted == ()
        options = mounts.super_options(target)
        assert "size=64k" in options and "no-such-tmpfs-option" not in options
    finally:
        mounts.unmount(target)
