"""The command line as a process: help for every command, the version, usage errors as one line with exit 2,
the pre-rendered top-level help and the console script's fast path.
"""

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
    ["approvals"],
    ["approve"],
    ["deny"],
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
        (["issue"], "issue needs exactly one of --task FILE or --resume REQUEST"),
        (["issue", "--task", "t.yaml", "--wait", "5m", "--no-wait"], "--wait and --no-wait exclude each other"),
        (["approve", "s-aaaaaaaaaaaa"], "Missing option '--digest'"),
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
    assert rendered == TOP_LEVEL_HELP, "broker/cli/help_text.py is stale: run scripts/gen-docs"


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["-h"], ["status", "--bogus"]])
def test_the_console_script_entry_point(args: list[str]) -> None:
    code = "import sys; from broker.entry import run; sys.argv = ['broker', *sys.argv[1:]]; run()"
    fast = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
    full = run(*args)
    assert (fast.returncode, fast.stdout) == (full.returncode, full.stdout if args != ["-h"] else fast.stdout)
    if args == ["--version"]:
        assert fast.stdout == f"broker {__version__}\n"
