"""One command table, two parsers: the small one every command runs through, and typer's, made from the same table.

Both must read every command line the same way; the small parser leaves to
typer what it does not model (help, completion, usage errors but a bad
choice), and a cold command loads neither typer nor pydantic.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.cli.parsing import Parsed, parse
from broker.cli.typed import build_app
from broker.commands.declaring import ARGUMENT, CHOICE, FLAG, MANY, PATH, REST, TEXT, WORD, Command
from broker.commands.table import COMMANDS
from broker.vocab.errors import UsageError
from tests.fixtures.brokerenv import BrokerEnv

ROOT = Path(__file__).resolve().parents[3]


SEEN: list[Parsed] = []


def _seen(parsed: Parsed) -> int:
    SEEN.append(parsed)
    return 0


APP = build_app(_seen)


def typer_reads(args: list[str]) -> Parsed | None:
    """What typer's application made from the table hands its command for ``args`` (None: it refused them)."""
    SEEN.clear()
    try:
        APP(args=args, prog_name="broker", standalone_mode=False)
    except Exception:
        return None
    return SEEN[0] if SEEN else None


def value_for(kind: str, choices: tuple[str, ...]) -> str:
    return {CHOICE: choices[-1] if choices else "", PATH: "/tmp/some file", TEXT: "fix-1"}.get(kind, "x y")


def command_lines(command: Command) -> list[list[str]]:
    """Command lines of ``command``: its required options, then each other option alone, both spellings."""
    words = list(command.words)
    required: list[str] = []
    rest: list[str] = []
    for option in command.options:
        if option.kind == REST:
            rest = ["--", "make", "--jobs", "2", "--", "x"]
        elif option.kind == WORD:
            # a required positional among the required options: approve REQUEST, session allow HOST:PORT
            required.append("pypi.org:443" if option.metavar == "HOST:PORT" else "s-aaaaaaaaaaaa")
        elif option.required:
            required += [option.flags[0], value_for(option.kind, option.choices)]
    lines = [[*words, *required, *rest]]
    for option in command.options:
        if option.required or option.kind in (REST, WORD):
            continue
        if option.kind == ARGUMENT:
            lines.append([*words, *required, "/etc/broker/policies", *rest])
            continue
        if option.kind == FLAG:
            lines.append([*words, *required, option.flags[0], *rest])
            continue
        value = value_for(option.kind, option.choices)
        lines.append([*words, option.flags[0], value, *required, *rest])
        lines.append([*words, *required, f"{option.flags[0]}={value}", *rest])
        if option.kind == MANY:
            lines.append([*words, *required, option.flags[0], "/a", option.flags[0], "/b", *rest])
    return lines


GLOBALS = [
    [],
    ["--config", "/tmp/b.toml"],
    ["--debug", "-v", "--log-format", "json"],
    ["--config=/x.toml", "--verbose"],
]
CORPUS = [
    [*GLOBALS[index % len(GLOBALS)], *line]
    for index, line in enumerate(line for command in COMMANDS for line in command_lines(command))
]


@pytest.mark.parametrize("line", CORPUS, ids=[" ".join(a) for a in CORPUS])
def test_both_parsers_read_a_command_line_alike(line: list[str]) -> None:
    ours, theirs = parse(line), typer_reads(line)
    assert ours is not None, line  # the small parser runs every well-formed command line itself
    assert theirs is not None, line
    assert (ours.command.name, ours.values, ours.options) == (theirs.command.name, theirs.values, theirs.options)


def test_exec_takes_its_command_from_the_first_word_that_is_not_an_option() -> None:
    for line in (
        ["exec", "--task", "t.yaml", "make", "--jobs", "2"],
        ["exec", "--task", "t.yaml", "--", "sh", "-c", "a -- b"],
        ["exec", "--task", "t.yaml", "--ro-bind", "/a", "sh", "--", "x"],
    ):
        ours, theirs = parse(line), typer_reads(line)
        assert ours is not None and theirs is not None
        assert ours.values == theirs.values, line


UNUSUAL = [
    ["status", "--help"],
    ["-h"],
    ["--version"],
    ["--config", "x", "--version"],
    ["status", "--bogus"],
    ["frobnicate"],
    ["approve", "--digest", "ab"],
    ["deny", "s-aaaaaaaaaaaa", "s-bbbbbbbbbbbb"],
    ["revoke", "--session"],
    ["status", "--json=1"],
    ["status", "--json", "--json"],
    ["-vh"],
    ["policy", "lint", "a", "b"],
    ["exec", "--task", "t.yaml"],
    ["issue", "--task", "--json"],
    [],
    ["policy"],
]


@pytest.mark.parametrize("args", UNUSUAL, ids=[" ".join(a) or "nothing" for a in UNUSUAL])
def test_the_small_parser_leaves_help_and_mistakes_to_typer(args: list[str]) -> None:
    assert parse(args) is None


def test_a_choice_outside_the_table_is_a_usage_error_in_the_words_typer_used_before_0_29() -> None:
    with pytest.raises(UsageError) as raised:
        parse(["issue", "--task", "t.yaml", "--format", "xml"])
    assert raised.value.message == (
        "Invalid value for '--format': 'xml' is not one of 'json', 'env', 'docker', 'podman', 'bwrap'"
    )


def test_the_config_comes_from_the_environment_when_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BROKER_CONFIG", "/from/env.toml")
    parsed = parse(["status"])
    assert parsed is not None and parsed.options["config"] == "/from/env.toml"
    assert typer_reads(["status"]) is not None
    theirs = typer_reads(["status"])
    assert theirs is not None and theirs.options == parsed.options


def test_every_command_of_the_table_is_typers_and_has_a_handler() -> None:
    import importlib

    for command in COMMANDS:
        module, _, name = command.handler.partition(":")
        assert callable(getattr(importlib.import_module(module), name)), command.handler
        help_page = subprocess.run(
            [sys.executable, "-m", "broker.cli", *command.words, "--help"], capture_output=True, text=True, check=True
        ).stdout
        for option in command.options:
            assert all(flag in help_page for flag in option.flags), (command.name, option.dest)


def test_a_cold_command_loads_neither_typer_nor_pydantic(broker_env: BrokerEnv) -> None:
    """typer 0.29 builds a pydantic TypeAdapter per option: 200 ms of CPU a cold command paid before the table."""
    code = (
        "import sys\n"
        "from broker.cli.app import main\n"
        f"code = main(['--config', {str(broker_env.config_path)!r}, '--log-format', 'json', 'status', '--json'])\n"
        "print(code, sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'pydantic', 'argparse')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.stdout.splitlines()[-1] == "0 []", done.stderr


def test_typer_is_not_patched() -> None:
    """Nothing in the broker reaches into typer's private modules (``typer._...``)."""
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "broker").rglob("*.py")
        if "typer._" in path.read_text() or "_TyperParameter" in path.read_text()
    ]
    assert offenders == []


def test_a_daemon_command_typer_parses_still_goes_to_the_daemon(tmp_path: Path) -> None:
    """A command line only typer reads (``-v`` twice here) must reach the daemon too, never run directly."""
    env = {**os.environ, "BROKER_SOCKET": str(tmp_path / "absent.sock")}
    program = "import sys\nfrom broker.entry import run\nsys.argv = ['broker', '-v', '-v', 'status']\nrun()"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, check=False)
    assert parse(["-v", "-v", "status"]) is None  # the premise: the small parser leaves this one to typer
    assert done.returncode == 7, done.stderr
    assert done.stderr.startswith("broker: error: cannot reach the broker daemon at ")
