"""What ``issue`` delivers, against the GitHub App emulator: a planted ``--session-file`` is refused before
anything is minted, and a document that cannot be delivered (stdout closed, a full tmpfs, SIGTERM while
printing) revokes everything and exits 4.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.github_app import GitHubAppEmulator
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.crash import add_github, full_pipe, github_tokens, wait_for
from tests.fixtures.github import AppKeys


def _plant(kind: str, tmp_path: Path) -> tuple[Path, Path]:
    """A hostile --session-file of ``kind``; returns it and the file that must stay untouched."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")  # root-owned when the tests run as root
    path = tmp_path / "session-id"
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(path)  # nobody reads it: opening it for writing must not wait
    elif kind == "theirs":
        path.write_text("precious\n")
        os.chown(path, 1000, 1000)
        victim = path
    else:
        os.link(victim, path)
    return path, victim


@pytest.mark.server
@pytest.mark.parametrize("kind", ["symlink", "fifo", "theirs", "hardlink"])
def test_a_planted_session_file_is_refused_before_anything_is_minted(
    kind: str, broker_env: BrokerEnv, github_emulator: GitHubAppEmulator, github_app_keys: AppKeys, tmp_path: Path
) -> None:
    if kind in ("theirs", "hardlink") and os.geteuid() != 0:
        pytest.skip("needs another user's file, or a root-owned file to link to")
    task = add_github(broker_env, github_emulator, github_app_keys)
    path, victim = _plant(kind, tmp_path)
    result = broker_env.run_process("issue", "--task", str(task), "--json", "--session-file", str(path), timeout=30)
    assert result.code == 2, result.stderr
    assert result.stderr.startswith(f"broker: error: --session-file {path} ") and result.stderr.count("\n") == 1
    assert result.stdout == ""
    assert github_emulator.state.tokens == {}  # nothing minted
    assert broker_env.log_records() == []  # no issuance began
    assert victim.read_text() == "precious\n"


def _issue_command(env: BrokerEnv, task: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "broker.cli", "--config", str(env.config_path), "issue", "--task", str(task), *extra]


def _assert_rolled_back(env: BrokerEnv, emulator: GitHubAppEmulator, code: int, stderr: str, cause: str) -> None:
    assert code == 4, stderr
    assert stderr == f"broker: error: issue failed after minting ({cause}); what was minted has been rolled back\n"
    assert list(github_tokens(emulator).values()) == ["revoked"]  # minted, then revoked at the provider
    [session] = env.run("status", "--all", "--json").json()
    assert session["state"] == "failed" and session["credentials"][0]["state"] == "revoked"
    assert env.session_dirs() == []


@pytest.mark.server
@pytest.mark.parametrize("how", ["closed", "reader gone"])
def test_stdout_that_cannot_take_the_document_revokes_and_exits_4(
    how: str, broker_env: BrokerEnv, github_emulator: GitHubAppEmulator, github_app_keys: AppKeys
) -> None:
    task = add_github(broker_env, github_emulator, github_app_keys)
    if how == "closed":
        command = ["sh", "-c", 'exec "$@" >&-', "sh", *_issue_command(broker_env, task, "--json")]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        cause = "standard output is closed; nothing was printed"
    else:
        read_end, write_end = os.pipe()
        os.close(read_end)  # the launcher died before reading
        try:
            result = subprocess.run(
                _issue_command(broker_env, task), stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60
            )
        finally:
            os.close(write_end)
        cause = "cannot print to standard output (Broken pipe)"
    _assert_rolled_back(broker_env, github_emulator, result.returncode, result.stderr, cause)


@pytest.mark.server
@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a full tmpfs")
def test_a_session_file_write_failing_after_minting_revokes_and_exits_4(
    broker_env: BrokerEnv, github_emulator: GitHubAppEmulator, github_app_keys: AppKeys, tmp_path: Path
) -> None:
    from broker.host import mounts

    task = add_github(broker_env, github_emulator, github_app_keys)
    full = tmp_path / "full"
    full.mkdir()
    mounts.mount_tmpfs(full, size="4k", mode=0o700, uid=0, gid=0)
    try:
        with contextlib.suppress(OSError), open(full / "filler", "wb") as filler:
            while True:
                filler.write(b"x" * 1024)
                filler.flush()
        path = full / "session-id"  # opens fine (a new file), but its write will find no space
        result = broker_env.run_process("issue", "--task", str(task), "--json", "--session-file", str(path))
        assert path.read_text() == ""
    finally:
        mounts.unmount(full)
    _assert_rolled_back(
        broker_env, github_emulator, result.code, result.stderr, f"--session-file {path}: No space left on device"
    )
    assert result.stdout == ""


@pytest.mark.server
def test_sigterm_while_printing_revokes_and_exits_4(
    broker_env: BrokerEnv, github_emulator: GitHubAppEmulator, github_app_keys: AppKeys
) -> None:
    """stdout is a full pipe nobody reads: the broker blocks printing the document until the signal."""
    task = add_github(broker_env, github_emulator, github_app_keys)
    read_end, write_end = full_pipe()
    process = subprocess.Popen(
        _issue_command(broker_env, task, "--json"), stdout=write_end, stderr=subprocess.PIPE, text=True
    )
    os.close(write_end)
    try:
        wait_for(lambda: _events(broker_env)[-2:] == ["session.issued", "checkpoint"])  # only delivery is left
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    with os.fdopen(read_end, "rb") as pipe:
        printed = pipe.read()
    assert process.returncode == 4, stderr
    assert stderr == "broker: error: interrupted by signal 15; what was minted has been rolled back\n"
    assert set(printed) == {ord("x")}  # not even part of the document came out
    assert list(github_tokens(github_emulator).values()) == ["revoked"]
    assert broker_env.run("audit", "verify").code == 0


def _events(env: BrokerEnv) -> list[str]:
    try:
        return env.events()
    except ValueError:  # a record being written right now
        return []
