"""Session tmpfs mounts, as root: each session gets a tmpfs of its own, sandbox-owned and sealed, mounted noswap
where the kernel has it (an option the kernel refuses is dropped and reported); a symlink planted at the
session path is refused before anything is mounted.
"""

from __future__ import annotations

import logging
import os
import platform
import stat
import subprocess
from pathlib import Path

import pytest

from broker.host import mounts
from broker.host.sessiondir import SessionDirectory, prepare_runtime_dir
from broker.vocab.errors import RuntimeDirError
from broker.vocab.secret import Secret

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts, chown)")


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
