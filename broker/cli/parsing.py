"""The small parser of ``broker``'s command line, made from the command table (``broker.commands.table``).

Every command runs through it: the console script, ``python -m broker.cli``
and the daemon's thin client, so a cold command pays for neither typer nor
argparse. It reads what the table declares, the way typer reads the same
table (``broker.cli.typed``): global options before the command's words,
``--name VALUE`` or ``--name=VALUE``, flags, repeatable options, exec's
command after ``--`` or after its first positional word. A choice outside the
table's is a usage error here (exit 2). Anything else it does not know (help,
shell completion, an unknown option or command, a missing value or option,
a combined ``-vh``) it leaves to typer, which answers exactly as it always
did: ``parse`` returns None. A test runs both parsers over the same command
lines and holds them equal.
"""

from __future__ import annotations

import os

from broker.commands.declaring import ARGUMENT, CHOICE, FLAG, MANY, REST, WORD, Command, Option
from broker.commands.table import COMMANDS, GLOBAL_OPTIONS
from broker.vocab.errors import UsageError


class Parsed:
    """A command line understood: the command, its values (by ``dest``) and the global options (by ``dest``)."""

    __slots__ = ("command", "options", "values")

    def __init__(self, command: Command, values: dict[str, object], options: dict[str, object]) -> None:
        self.command = command
        self.values = values
        self.options = options


class _Unknown(Exception):
    """Something the small parser does not model: typer parses this command line instead."""


def parse(args: list[str]) -> Parsed | None:
    """``args`` (without the program name) parsed, or None when typer must parse them (help, errors, the unusual)."""
    try:
        options, rest = _read(args, GLOBAL_OPTIONS, stop_at_positional=True)
        command = _command(rest)
        values, extra = _read(rest[len(command.words) :], command.options, stop_at_positional=not command.interspersed)
        _positionals(command, values, extra)
    except _Unknown:
        return None
    return Parsed(command, values, options)


def _command(rest: list[str]) -> Command:
    for command in COMMANDS:
        if tuple(rest[: len(command.words)]) == command.words:
            return command
    raise _Unknown


def _read(
    args: list[str], declared: tuple[Option, ...], *, stop_at_positional: bool
) -> tuple[dict[str, object], list[str]]:
    """The options in ``args`` (every declared one, its default when absent) and the positional words left."""
    by_flag = {flag: option for option in declared for flag in option.flags}
    values: dict[str, object] = {}
    positional: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            positional += ["--", *args[index:]]
            break
        if not arg.startswith("-") or arg == "-":
            if stop_at_positional:
                positional += args[index - 1 :]
                break
            positional.append(arg)
            continue
        name, given, value = arg.partition("=")
        option = by_flag.get(name)
        if option is None or (option.dest in values and option.kind != MANY):
            raise _Unknown  # unknown, -h/--help, --version, combined short flags, repeated: typer's
        if option.kind == FLAG:
            if given:
                raise _Unknown
            values[option.dest] = True
            continue
        if not given:
            if index == len(args) or (args[index].startswith("-") and args[index] != "-"):
                raise _Unknown  # a missing value, or one that looks like an option: typer decides
            value = args[index]
            index += 1
        if option.kind == CHOICE and value not in option.choices:
            allowed = ", ".join(repr(choice) for choice in option.choices)
            raise UsageError(f"Invalid value for {name!r}: {value!r} is not one of {allowed}")
        if option.kind == MANY:
            values.setdefault(option.dest, []).append(value)  # type: ignore[attr-defined]
        else:
            values[option.dest] = value
    for option in declared:
        if option.positional or option.dest in values:
            continue
        if option.kind == MANY:
            values[option.dest] = []
            continue
        if option.envvar is not None and os.environ.get(option.envvar):
            values[option.dest] = os.environ[option.envvar]
        elif option.required:
            raise _Unknown  # typer names the missing option
        else:
            values[option.dest] = option.default
    return values, positional


def _positionals(command: Command, values: dict[str, object], words: list[str]) -> None:
    """The command's positional values from ``words``: exec's command, policy lint's directory, approve's request."""
    declared = [option for option in command.options if option.positional]
    if words[:1] == ["--"]:
        words = words[1:]
    elif "--" in words and not (declared and declared[0].kind == REST):
        raise _Unknown
    if not declared:
        if words:
            raise _Unknown  # typer names the extra argument
        return
    [option] = declared
    if option.kind == REST:
        if not words:
            raise _Unknown  # typer names the missing command
        values[option.dest] = list(words)
    elif option.kind == ARGUMENT:
        if len(words) > 1:
            raise _Unknown
        values[option.dest] = words[0] if words else option.default
    elif option.kind == WORD:
        if len(words) != 1:
            raise _Unknown  # typer names the missing or extra argument
        values[option.dest] = words[0]
