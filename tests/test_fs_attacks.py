"""Filesystem attacks on the runtime dir, the session directories, ``.keep`` and ``state_dir``.

The attacker plants symbolic links or loosens modes where the broker writes,
or swaps a path while the broker is writing. Secrets must never land outside
the session directory (or ``.keep``), and nothing outside may be deleted.

Tests marked ``xfail(strict=True)`` state a protection the broker does not
have today (see the reason of each); they start passing, and then fail as
XPASS, once the protection exists.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.core.inputs.config import check_own_directory
from broker.host import mounts
from broker.host.keepsafe import KeepSafe
from broker.host.libc import libc
from broker.host.sessiondir import RuntimeDir, SessionDirectory, prepare_runtime_dir, remove_session_path
from broker.vocab.errors import RuntimeDirError
from broker.vocab.secret import Secret
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.net import closed_port

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (tmpfs mounts, chown to another user)")

CANARY = "canary-fs-attack-7f3a9c"
TASK = """
version: 1
task: fix-build-7
ttl: 20m
sandbox: {uid: 1000, gid: 1000, mount_path: /run/secrets}
credentials:
  - {name: kv, provider: vault, policies: [ci-read], ttl: 10m, num_uses: 5}
"""


def _scrub(path: Path) -> None:
    """Remove ``path`` whatever it is (a runtime dir with sealed sessions, a symlink, a mount)."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not path.is_dir():
        path.unlink()
        return
    for child in list(path.iterdir()):
        if child.is_symlink() or not child.is_dir():
            child.unlink()
        else:
            remove_session_path(path, child.name)
    if mounts.is_mount_point(path):
        mounts.unmount(path)
    path.rmdir()


@pytest.fixture
def shm_dir(tmp_path: Path) -> Iterator[Path]:
    """A runtime dir on the host's /dev/shm tmpfs, for the no-mount mode."""
    path = Path("/dev/shm") / f"broker-fs-{tmp_path.name}"
    yield path
    _scrub(path)


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[Path]:
    """A directory outside every session, on the same tmpfs as ``shm_dir`` (so renames and links work)."""
    path = Path("/dev/shm") / f"broker-fs-{tmp_path.name}-outside"
    path.mkdir(mode=0o777)
    yield path
    if mounts.is_mount_point(path):
        mounts.unmount(path)
    shutil.rmtree(path)


def session(shm_dir: Path, session_id: str = "s-aaaaaaaaaaaa") -> SessionDirectory:
    runtime = prepare_runtime_dir(shm_dir, "never")
    directory = SessionDirectory(runtime, session_id, os.getuid(), os.getgid())
    directory.create()
    return directory


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


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


# -- the runtime dir through the CLI ---------------------------------------------------------


def vault_env(tmp_path: Path, runtime_dir: Path | None = None) -> BrokerEnv:
    """A broker allowing TASK, whose vault is a closed port: a run that got past the checks would exit 4."""
    env = make_env(tmp_path, runtime_dir)
    token = env.write_secret("vault-token", CANARY)
    env.add_provider("vault", {"type": "vault", "addr": f"http://127.0.0.1:{closed_port()}", "token_file": str(token)})
    return env


def refused(env: BrokerEnv, fragment: str, code: int = 2) -> None:
    result = env.run("issue", "--task", str(env.write_task(TASK)))
    assert result.code == code, result.stderr
    assert result.stderr.startswith("broker: error: ") and result.stderr.count("\n") == 1
    assert fragment in result.stderr
    assert "credential.issued" not in env.events()


def test_cli_refuses_a_symlinked_runtime_dir(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o711)
    link = tmp_path / "run"
    link.symlink_to(target)
    refused(vault_env(tmp_path, link), "is a symbolic link")
    assert list(target.iterdir()) == []


def test_cli_refuses_a_runtime_dir_below_a_world_writable_parent(tmp_path: Path) -> None:
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)
    refused(vault_env(tmp_path, parent / "run"), "is world-writable")
    assert [p.name for p in parent.iterdir()] == ["run"]
    assert list((parent / "run").iterdir()) == []


@pytest.mark.parametrize("mode", [0o775, 0o717, 0o777])
def test_cli_refuses_a_runtime_dir_writable_by_group_or_others(tmp_path: Path, mode: int) -> None:
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(mode)
    refused(vault_env(tmp_path, run), "writable by group or others")
    assert list(run.iterdir()) == []


@root_only
def test_cli_refuses_a_runtime_dir_owned_by_another_user(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o711)
    os.chown(run, 1000, 1000)
    refused(vault_env(tmp_path, run), "is not owned by the broker's user")


@root_only
def test_a_sticky_root_owned_world_writable_parent_is_accepted(tmp_path: Path) -> None:
    """Like /tmp or /dev/shm: others cannot rename or delete the broker's runtime_dir inside it."""
    parent = tmp_path / "sticky"
    parent.mkdir()
    parent.chmod(0o1777)
    runtime = prepare_runtime_dir(parent / "run", "auto")
    assert isinstance(runtime, RuntimeDir) and runtime.path == parent / "run"


# -- state_dir ---------------------------------------------------------------------------


DENIED_TASK = TASK.replace("[ci-read]", "[prod-admin]")


def test_a_symlink_planted_at_the_issuance_log_is_not_followed(tmp_path: Path) -> None:
    env = vault_env(tmp_path)
    env.state_dir.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (env.state_dir / "issuance.jsonl").symlink_to(victim)
    result = env.run("issue", "--task", str(env.write_task(DENIED_TASK)))
    assert result.code != 0
    assert result.stderr.startswith("broker: error: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    assert victim.read_text() == "untouched"


def test_a_symlink_planted_at_the_issuance_log_is_named_in_the_error(tmp_path: Path) -> None:
    env = vault_env(tmp_path)
    env.state_dir.mkdir(mode=0o700)
    (env.state_dir / "issuance.jsonl").symlink_to(tmp_path / "victim")
    result = env.run("issue", "--task", str(env.write_task(DENIED_TASK)))
    assert result.code == 2 and "issuance" in result.stderr


def test_a_symlink_planted_at_the_session_store_is_not_followed(tmp_path: Path) -> None:
    env = vault_env(tmp_path)
    env.state_dir.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (env.state_dir / "sessions.db").symlink_to(elsewhere / "planted.db")
    env.run("issue", "--task", str(env.write_task(DENIED_TASK)))
    assert list(elsewhere.iterdir()) == []


def test_a_world_writable_state_dir_is_refused(tmp_path: Path) -> None:
    env = vault_env(tmp_path)
    env.state_dir.mkdir()
    env.state_dir.chmod(0o777)
    result = env.run("issue", "--task", str(env.write_task(DENIED_TASK)))
    assert result.code == 2 and "state_dir" in result.stderr


def test_a_symlinked_state_dir_is_used_today(tmp_path: Path) -> None:
    """Behaviour found: state_dir may be a symbolic link (unlike runtime_dir); the broker follows it.

    It holds no secrets, and an operator may keep it on another disk; what matters is who may
    write to the link and its target (see the world-writable case above).
    """
    env = vault_env(tmp_path)
    target = tmp_path / "real-state"
    target.mkdir(mode=0o700)
    env.state_dir.symlink_to(target)
    result = env.run("issue", "--task", str(env.write_task(DENIED_TASK)))
    assert result.code == 3, result.stderr
    assert (target / "issuance.jsonl").exists()
    assert CANARY not in (target / "issuance.jsonl").read_text()


# -- sweep removes only the broker's own -------------------------------------------------------


MS_BIND = 4096


def snapshot(path: Path) -> dict[str, str]:
    """Every entry below ``path``: a symbolic link's target, a file's text, or "dir" (links not followed)."""
    entries = {}
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            entry = Path(top) / name
            relative = str(entry.relative_to(path))
            if entry.is_symlink():
                entries[relative] = "-> " + os.readlink(entry)
            else:
                entries[relative] = entry.read_text() if entry.is_file() else "dir"
    return entries


def test_sweep_leaves_alone_and_reports_what_is_not_provably_a_broker_session(tmp_path: Path, outside: Path) -> None:
    env = vault_env(tmp_path)
    run = env.runtime_dir
    run.mkdir(mode=0o711)
    (outside / "precious").write_text(CANARY)
    (outside / "session.json").write_text('{"session": "s-eeeeeeeeeeee"}')
    (run / "project").mkdir()
    (run / "project" / "data.txt").write_text("someone else's")
    (run / "notes.txt").write_text("someone else's")
    (run / "link").symlink_to(outside)
    (run / "s-aaaaaaaaaaaa").mkdir()  # the shape of a session id, but nothing proves it is one
    (run / "s-aaaaaaaaaaaa" / "data.txt").write_text("someone else's")
    (run / "s-bbbbbbbbbbbb").mkdir()  # a session.json naming another session
    (run / "s-bbbbbbbbbbbb" / "session.json").write_text('{"session": "s-cccccccccccc"}')
    (run / "s-dddddddddddd").symlink_to(outside)
    (run / "s-eeeeeeeeeeee").mkdir()  # its session.json is a symbolic link to one naming it
    (run / "s-eeeeeeeeeeee" / "session.json").symlink_to(outside / "session.json")
    (run / "s-nothex-with-dash").mkdir()
    planted = sorted(os.listdir(run))
    mounted: list[Path] = []
    if os.geteuid() == 0:
        other_tmpfs = run / "s-ffffffffffff"  # a tmpfs, but not one the broker mounts
        other_tmpfs.mkdir()
        mounts.mount_tmpfs(other_tmpfs, size="1m", mode=0o700, uid=0, gid=0)
        mounted.append(other_tmpfs)
        (other_tmpfs / "data.txt").write_text("someone else's")
        bound = run / "s-gggggggggggg"  # another directory bound here, holding a session.json naming it
        bound.mkdir()
        (outside / "bound").mkdir()
        (outside / "bound" / "session.json").write_text('{"session": "s-gggggggggggg"}')
        assert libc().mount(os.fsencode(outside / "bound"), os.fsencode(bound), None, MS_BIND, None) == 0
        mounted.append(bound)
        planted = sorted(os.listdir(run))
    before, outside_before = snapshot(run), snapshot(outside)
    try:
        result = env.run("sweep", "--json")
        assert result.code == 0, result.stderr
        assert result.json()["foreign"] == planted and result.json()["orphans_removed"] == []
        human = env.run("sweep")
        assert human.code == 0 and f"foreign {len(planted)}" in human.stdout
        assert all(f"foreign, left alone: '{name}'" in human.stdout for name in planted)
        assert snapshot(run) == before and snapshot(outside) == outside_before
        assert all(mounts.is_mount_point(path) for path in mounted)
    finally:
        for path in mounted:
            if mounts.is_mount_point(path):
                mounts.unmount(path)


SHARED_DIRECTORIES = ["/", "/run", "/tmp", "/var/run", "/dev/shm", "/var/tmp", "/root", "/home", "/home/someone"]


@pytest.mark.parametrize("key", ["runtime_dir", "state_dir"])
@pytest.mark.parametrize("directory", [*SHARED_DIRECTORIES, "/var/run/", "/run/broker/..", "alias-of-run"])
def test_a_shared_system_or_home_directory_is_refused_before_anything_touches_the_disk(
    tmp_path: Path, key: str, directory: str
) -> None:
    env = make_env(tmp_path)
    if directory == "alias-of-run":
        (tmp_path / directory).symlink_to("/run")
        directory = str(tmp_path / directory)
    env.settings[key] = directory
    env.write_config()
    before = snapshot(tmp_path)
    result = env.run("status")  # the config is refused as it loads: every command stops there (never try sweep)
    assert result.code == 2, result.stderr
    assert result.stderr.startswith(f"broker: error: {key}: ") and result.stderr.count("\n") == 1
    assert "shared system or home directory" in result.stderr
    assert snapshot(tmp_path) == before  # not even the state_dir or the audit key


def test_init_refuses_a_shared_runtime_dir_before_writing_anything(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    config_dir = tmp_path / "etc"
    result = env.run("init", "--dir", str(config_dir), "--state-dir", str(tmp_path / "state"), "--runtime-dir", "/run")
    assert result.code == 2 and "--runtime-dir: '/run' is a shared system or home directory" in result.stderr
    assert not config_dir.exists() and not (tmp_path / "state").exists()


@pytest.mark.parametrize("directory", ["/run/broker", "/var/lib/broker", "/run/user/1000/broker", "/home/x/broker"])
def test_a_directory_of_its_own_is_accepted(directory: str) -> None:
    assert check_own_directory("runtime_dir", Path(directory)) == Path(directory)
