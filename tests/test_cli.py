"""The command line surface: help, version, usage errors as one line, exit codes; what issue delivers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from broker import __version__
from devstack.github_app import GitHubAppEmulator
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.crash import add_github, full_pipe, github_tokens, wait_for
from tests.fixtures.github import AppKeys


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, check=False)


def test_version() -> None:
    result = run("--version")
    assert (result.returncode, result.stdout.strip()) == (0, f"broker {__version__}")


COMMANDS = [
    ["issue"],
    ["revoke"],
    ["status"],
    ["renew"],
    ["exec"],
    ["sweep"],
    ["init"],
    ["doctor"],
    ["policy", "check"],
    ["policy", "lint"],
    ["audit", "verify"],
    ["audit", "list"],
    ["audit", "lookup"],
    ["audit", "active"],
    ["audit", "public-key"],
    ["audit", "rotate-key"],
]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command: list[str]) -> None:
    result = run(*command, "--help")
    assert result.returncode == 0
    assert "Example: broker" in result.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["frobnicate"], "No such command 'frobnicate'"),
        (["issue"], "Missing option '--task'"),
        (["issue", "--task", "t.yaml", "--format", "xml"], "Invalid value for '--format'"),
        (["revoke"], "revoke needs exactly one of --session ID or --task NAME"),
        (["status", "--bogus"], "No such option: --bogus"),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(args: list[str], fragment: str, tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text(f'state_dir = "{tmp_path}/s"\n')
    result = run("--config", str(config), *args)
    assert result.returncode == 2
    assert result.stderr.startswith("broker: error: ") and fragment in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_unknown_session_is_bad_input(broker_env: BrokerEnv) -> None:
    result = broker_env.run("revoke", "--session", "s-doesnotexist")
    assert result.code == 2 and result.stderr == "broker: error: unknown session 's-doesnotexist'\n"


def test_a_config_nested_too_deeply_is_a_one_line_error_from_the_console_script(broker_env: BrokerEnv) -> None:
    """The look for [daemon] socket parses the config before the command line does: it must not crash on it."""
    broker_env.config_path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    program = f"import sys\nfrom broker.entry import run\nsys.argv = ['broker', '--config', {str(broker_env.config_path)!r}, 'status']\nrun()"
    env = {key: value for key, value in os.environ.items() if key != "BROKER_SOCKET"}
    completed = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60)
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr == (
        f"broker: error: config file {broker_env.config_path} is not valid TOML: too deeply nested or a number too large\n"
    )


def test_an_unreadable_state_dir_is_a_one_line_error(broker_env: BrokerEnv) -> None:
    broker_env.settings["state_dir"] = "/proc/version/state"
    broker_env.write_config()
    result = broker_env.run("status")
    assert result.code == 2 and result.stderr.startswith("broker: error: state_dir /proc/version/state")
    assert result.stderr.count("\n") == 1


def test_a_corrupt_session_store_is_a_one_line_error(broker_env: BrokerEnv) -> None:
    broker_env.state_dir.mkdir(mode=0o700)
    (broker_env.state_dir / "sessions.db").write_bytes(b"this is not sqlite" * 100)
    result = broker_env.run("status")
    assert result.code == 2 and "session store" in result.stderr and result.stderr.count("\n") == 1


def test_the_pre_rendered_top_level_help_is_current() -> None:
    """The console script answers --help without loading the CLI; the text must be what the CLI renders."""
    from broker.cli.help_text import TOP_LEVEL_HELP

    rendered = subprocess.run(
        [sys.executable, "-m", "broker.cli", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        check=True,
    ).stdout
    assert rendered == TOP_LEVEL_HELP, "broker/cli/help_text.py is stale: run scripts/gen-reference"


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["-h"], ["status", "--bogus"]])
def test_the_console_script_entry_point(args: list[str]) -> None:
    code = "import sys; from broker.entry import run; sys.argv = ['broker', *sys.argv[1:]]; run()"
    fast = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
    full = run(*args)
    assert (fast.returncode, fast.stdout) == (full.returncode, full.stdout if args != ["-h"] else fast.stdout)
    if args == ["--version"]:
        assert fast.stdout == f"broker {__version__}\n"


def tree_of(path: Path) -> list[str]:
    return sorted(str(Path(top, name).relative_to(path)) for top, dirs, files in os.walk(path) for name in dirs + files)


SESSION_COMMANDS = [["revoke", "--session"], ["renew", "--session"], ["audit", "list", "--session"]]
BAD_SESSION_IDS = [
    "../../x",
    "../../../x",
    "s-aaaaaaaaaaaa/../../../x",
    "ABSOLUTE",
    "s-" + "a" * 33,
    "s-aaaaaaaaaaa",
    "S-AAAAAAAAAAAA",
    "s-aaaaaaaaaaaa\n",
    "",
]


@pytest.mark.parametrize("command", SESSION_COMMANDS, ids=lambda c: c[0] if c[0] != "audit" else "audit-list")
@pytest.mark.parametrize("session", BAD_SESSION_IDS)
def test_a_malformed_session_id_is_refused_before_any_file_is_touched(
    broker_env: BrokerEnv, tmp_path: Path, command: list[str], session: str
) -> None:
    """``renew --session ../../x`` used to create ``x.lock`` wherever the id pointed, before any lookup."""
    if session == "ABSOLUTE":
        session = str(tmp_path / "anywhere")
    before = tree_of(tmp_path)
    result = broker_env.run(*command, session)
    assert result.code == 2, result.stderr
    assert result.stderr.startswith("broker: error: --session ") and result.stderr.count("\n") == 1
    assert "is not a session id" in result.stderr
    assert tree_of(tmp_path) == before  # no lock file at the target, not even the state_dir
    assert not broker_env.state_dir.exists()


@pytest.mark.parametrize("session", ["s-aaaaaaaaaaaa", "s-" + "0123456789abcdef" * 2])
def test_a_well_formed_unknown_session_is_looked_up(broker_env: BrokerEnv, session: str) -> None:
    for command in SESSION_COMMANDS[:2]:
        result = broker_env.run(*command, session)
        assert result.code == 2 and result.stderr == f"broker: error: unknown session {session!r}\n"


# -- issue --session-file and delivery: nothing minted is left behind a failed issue ------


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
