"""Filesystem attacks on ``runtime_dir`` and ``state_dir`` through the CLI: a symbolic link, a loose mode, another
owner or a world-writable parent is refused before anything is minted; a link planted at the log or the session
store is not followed; a shared system or home directory is refused before anything touches the disk.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.core.inputs.directories import check_own_directory
from broker.host.sessiondir import RuntimeDir, prepare_runtime_dir
from tests.fixtures.brokerenv import make_env
from tests.security.filesystem.targets import CANARY, TASK, refused, root_only, snapshot, vault_env

# -- the runtime dir through the CLI ---------------------------------------------------------


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
