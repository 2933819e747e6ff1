"""The command line surface: help, version, usage errors as one line, exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker import __version__
from tests.fixtures.brokerenv import BrokerEnv


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
    from broker.help_text import TOP_LEVEL_HELP

    rendered = subprocess.run(
        [sys.executable, "-m", "broker.cli", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        check=True,
    ).stdout
    assert rendered == TOP_LEVEL_HELP, "broker/help_text.py is stale: run scripts/gen-reference"


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
