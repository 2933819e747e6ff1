"""Session directories without mounting (no root): the runtime dir must be tmpfs and is refused as a symlink or
writable by others; files are written atomically and never through a planted symlink; removal is idempotent.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.host.sessiondir import RuntimeDir, SessionDirectory, prepare_runtime_dir, remove_session_path
from broker.vocab.errors import RuntimeDirError
from broker.vocab.secret import Secret


@pytest.fixture
def shm_dir(tmp_path: Path) -> Iterator[Path]:
    """A runtime dir on the host's /dev/shm tmpfs, for the no-mount mode."""
    path = Path("/dev/shm") / f"broker-test-{tmp_path.name}"
    yield path
    if path.exists():
        for child in list(path.iterdir()):
            remove_session_path(path, child.name)
        path.rmdir()


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
