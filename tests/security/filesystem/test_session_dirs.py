"""Filesystem attacks on the session directories and ``.keep``: symbolic links planted where the broker writes,
or swapped in while it writes. Secrets must never land outside the session directory (or ``.keep``), and
nothing outside may be deleted.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.host import mounts
from broker.host.keepsafe import KeepSafe
from broker.host.sessiondir import SessionDirectory, prepare_runtime_dir
from broker.vocab.errors import RuntimeDirError
from broker.vocab.secret import Secret
from tests.security.filesystem.targets import CANARY, root_only, session, tree

# -- the session directory ----------------------------------------------------------------


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-directory", "dangling"])
def test_a_precreated_symlink_at_the_session_path_is_refused_without_mounting(
    shm_dir: Path, outside: Path, dangling: bool
) -> None:
    runtime = prepare_runtime_dir(shm_dir, "never")
    (shm_dir / "s-bbbbbbbbbbbb").symlink_to(outside / "missing" if dangling else outside)
    directory = SessionDirectory(runtime, "s-bbbbbbbbbbbb", os.getuid(), os.getgid())
    with pytest.raises(RuntimeDirError, match="already exists"):
        directory.create()
    with pytest.raises(OSError):
        directory.write_credential("kv", {"token": Secret(CANARY)})
    assert tree(outside) == []


def test_a_session_directory_swapped_for_a_symlink_is_not_written_through(shm_dir: Path, outside: Path) -> None:
    directory = session(shm_dir)
    os.rename(directory.path, shm_dir / "moved-away")
    directory.path.symlink_to(outside)
    with pytest.raises(OSError):
        directory.write_credential("kv", {"token": Secret(CANARY)})
    with pytest.raises(OSError):
        directory.write_file("session.json", CANARY.encode())
    with pytest.raises(OSError):
        directory.seal()
    assert tree(outside) == []


def race(
    attack: Callable[[], None], work: Callable[[], object], rounds: int, *, both: bool = False
) -> tuple[int, list[BaseException]]:
    """Run ``work`` ``rounds`` times while ``attack`` loops in a thread; (successes, exceptions).

    With ``both``, keep going (up to 10 s) until ``work`` has both succeeded and failed at least once,
    so the race is known to have happened in both directions.
    """
    stop = threading.Event()
    attacker_errors: list[BaseException] = []

    def attacker() -> None:
        while not stop.is_set():
            try:
                attack()
            except OSError:
                pass
            except BaseException as exc:  # a bug in the test itself
                attacker_errors.append(exc)
                return

    thread = threading.Thread(target=attacker)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # interleave the two threads as finely as the GIL allows
    thread.start()
    successes, failures = 0, list[BaseException]()
    try:
        deadline = time.monotonic() + 10
        done = 0
        while done < rounds or (both and not (successes and failures) and time.monotonic() < deadline):
            done += 1
            try:
                work()
                successes += 1
            except BaseException as exc:
                failures.append(exc)
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert attacker_errors == []
    return successes, failures


def test_a_credential_directory_swapped_for_a_symlink_during_writes_never_leaks_outside(
    shm_dir: Path, outside: Path
) -> None:
    """TOCTOU: ``<session>/kv`` is replaced by a symlink to ``outside`` over and over while the broker writes."""
    directory = session(shm_dir)
    kv = directory.path / "kv"
    moved = iter(range(10**9))

    def attack() -> None:
        if not kv.is_symlink():
            with contextlib.suppress(FileNotFoundError):
                os.rename(kv, directory.path / f"moved-{next(moved)}")
        with contextlib.suppress(FileExistsError):
            os.symlink(outside, kv)
        time.sleep(0)
        with contextlib.suppress(FileNotFoundError):
            if kv.is_symlink():
                os.unlink(kv)  # let the broker create a fresh directory, then swap again
        time.sleep(0)

    work = lambda: directory.write_credential("kv", {"token": Secret(CANARY)})  # noqa: E731
    successes, failures = race(attack, work, 400, both=True)
    assert tree(outside) == [], "a secret was written outside the session directory"
    assert all(isinstance(exc, OSError) for exc in failures), failures[:3]
    assert successes > 0 and failures
    for path in directory.path.rglob("*"):  # whatever was written landed inside, as a regular 0400 file
        if path.is_file() and not path.is_symlink():
            assert stat.S_IMODE(path.lstat().st_mode) == 0o400 and path.read_text() == CANARY


def test_a_token_file_swapped_for_a_symlink_during_writes_never_leaks_outside(shm_dir: Path, outside: Path) -> None:
    directory = session(shm_dir)
    directory.write_credential("kv", {"token": Secret("first")})
    token = directory.path / "kv" / "token"
    target = outside / "victim"
    target.write_text("untouched")

    def attack() -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(token)
        with contextlib.suppress(FileExistsError):
            os.symlink(target, token)

    _, failures = race(attack, lambda: directory.write_credential("kv", {"token": Secret(CANARY)}), 400)
    assert target.read_text() == "untouched"
    assert tree(outside) == ["victim"]
    assert all(isinstance(exc, OSError) for exc in failures), failures[:3]


def test_removal_never_follows_planted_symlinks(shm_dir: Path, outside: Path) -> None:
    directory = session(shm_dir)
    directory.write_credential("kv", {"token": Secret(CANARY)})
    (outside / "keep-me").mkdir()
    (outside / "keep-me" / "file").write_text("precious")
    (outside / "file").write_text("precious")
    (directory.path / "kv" / "link-to-file").symlink_to(outside / "file")
    (directory.path / "kv" / "link-to-dir").symlink_to(outside / "keep-me")
    (directory.path / "link-to-outside").symlink_to(outside)
    directory.seal()
    assert directory.remove()
    assert not os.path.lexists(directory.path)
    assert tree(outside) == ["file", "keep-me", "keep-me/file"]


def test_removal_racing_symlink_swaps_deletes_nothing_outside(shm_dir: Path, outside: Path) -> None:
    (outside / "sub").mkdir()
    for name in ("a", "b", "sub/c"):
        (outside / name).write_text("precious")
    for round_ in range(30):
        directory = session(shm_dir, f"s-race{round_:08d}")
        for index in range(8):
            directory.write_credential(f"c{index}", {"token": Secret(CANARY), "other": "x"})
        names = iter(range(10**9))

        def attack(path: Path = directory.path, names: Iterator[int] = names) -> None:
            for index in range(8):
                victim = path / f"c{index}"
                with contextlib.suppress(FileNotFoundError, FileExistsError):
                    os.rename(victim, path / f"gone-{next(names)}")
                    os.symlink(outside, victim)

        _, failures = race(attack, directory.remove, 1)
        assert all(isinstance(exc, OSError) for exc in failures), failures
        with contextlib.suppress(OSError):  # a second pass, without the attacker, finishes the job
            directory.remove()
        assert tree(outside) == ["a", "b", "sub", "sub/c"], f"round {round_}"


# -- .keep (revocation secrets) -------------------------------------------------------------


def test_a_keep_symlink_is_not_written_through_without_mounting(shm_dir: Path, outside: Path) -> None:
    runtime = prepare_runtime_dir(shm_dir, "never")
    (shm_dir / ".keep").symlink_to(outside)
    with pytest.raises(RuntimeDirError, match="is not a directory"):
        KeepSafe(shm_dir).put(runtime, "s-cccccccccccc", "repo", Secret(CANARY))
    assert tree(outside) == []
    assert KeepSafe(shm_dir).held() == []


@root_only
def test_a_keep_symlink_is_not_written_through_when_mounting(tmp_path: Path, outside: Path) -> None:
    runtime = prepare_runtime_dir(tmp_path / "run", "auto")
    assert runtime.mount_per_session
    (runtime.path / ".keep").symlink_to(outside)
    try:
        with pytest.raises(RuntimeDirError, match="is not a directory"):
            KeepSafe(runtime.path).put(runtime, "s-cccccccccccc", "repo", Secret(CANARY))
        assert tree(outside) == []
    finally:
        if mounts.is_mount_point(outside):
            mounts.unmount(outside)


@root_only
def test_a_keep_symlink_is_refused_before_anything_is_mounted(tmp_path: Path, outside: Path) -> None:
    runtime = prepare_runtime_dir(tmp_path / "run", "auto")
    (runtime.path / ".keep").symlink_to(outside)
    try:
        with pytest.raises(RuntimeDirError):
            KeepSafe(runtime.path).put(runtime, "s-cccccccccccc", "repo", Secret(CANARY))
        assert not mounts.is_mount_point(outside)
    finally:
        if mounts.is_mount_point(outside):
            mounts.unmount(outside)


@root_only
def test_a_keep_directory_owned_by_another_user_is_refused(shm_dir: Path) -> None:
    runtime = prepare_runtime_dir(shm_dir, "never")
    keep = shm_dir / ".keep"
    keep.mkdir()
    os.chown(keep, 1000, 1000)
    keep.chmod(0o777)
    with pytest.raises(RuntimeDirError):
        KeepSafe(shm_dir).put(runtime, "s-cccccccccccc", "repo", Secret(CANARY))
    assert os.listdir(keep) == []
