"""The typer application, made from the command table: help pages, shell completion, and the rare command line
the small parser leaves to it (``broker.cli.parsing``).

Each command of ``broker.commands.table`` becomes a typer command whose signature
is built from its options (``inspect.Signature``, which typer reads like any
function's); what typer parses goes to the same ``run`` as what the small
parser parses. typer is loaded only on this path, never by a command the small
parser understood, so its per-option coercion (a pydantic ``TypeAdapter``
for each option since typer 0.29) costs no cold command anything.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from broker import __version__
from broker.cli.parsing import Parsed
from broker.commands.declaring import ARGUMENT, CHOICE, FLAG, MANY, PATH, REST, WORD, Command, Option
from broker.commands.table import COMMANDS, GLOBAL_OPTIONS, GROUPS, PROGRAM_HELP, VERSION_HELP

Run = Callable[[Parsed], int]
_GLOBALS = "broker.global_options"  # where the group's callback keeps the global options (``ctx.meta``)


class Interrupted(Exception):
    """Ctrl-C inside a command typer runs: typer would turn KeyboardInterrupt into a silent exit 130."""


def build_app(run: Run) -> typer.Typer:
    """The ``broker`` application; each command hands its values to ``run``."""
    app = typer.Typer(
        name="broker",
        help=PROGRAM_HELP,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_function(_global_options, [*GLOBAL_OPTIONS], version=True))
    groups: dict[str, typer.Typer] = {}
    for command in COMMANDS:
        target = app
        if len(command.words) > 1:
            word = command.words[0]
            if word not in groups:
                [group] = [g for g in GROUPS if g.word == word]
                groups[word] = typer.Typer(help=group.help, no_args_is_help=True)
                app.add_typer(groups[word], name=word)
            target = groups[word]
        settings = {} if command.interspersed else {"allow_interspersed_args": False}
        target.command(command.words[-1], help=command.help, context_settings=settings)(
            _function(_runner(command, run), list(command.options))
        )
    return app


def _global_options(ctx: typer.Context, **values: Any) -> None:
    ctx.meta[_GLOBALS] = values


def _runner(command: Command, run: Run) -> Callable[..., int]:
    def invoke(ctx: typer.Context, **values: Any) -> int:
        given = {
            option.dest: _plain(option, values[option.dest]) for option in command.options
        }  # as the small parser gives them
        try:
            return run(Parsed(command, given, dict(ctx.meta.get(_GLOBALS, {}))))
        except KeyboardInterrupt:
            raise Interrupted from None

    return invoke


def _plain(option: Option, value: Any) -> object:
    if option.kind in (PATH, ARGUMENT):
        return None if value is None else str(value)
    if option.kind in (MANY, REST):
        return list(value or ())
    return value


def _function(body: Callable[..., Any], options: list[Option], *, version: bool = False) -> Callable[..., Any]:
    """``body`` with the signature typer reads: a context, then one annotated parameter per option."""
    parameters = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]
    parameters += [_parameter(option) for option in sorted(options, key=lambda o: not o.positional)]
    if version:
        info = typer.Option("--version", callback=_version, is_eager=True, help=VERSION_HELP)
        parameters.append(_keyword("version", Annotated[bool, info], False))

    def function(ctx: typer.Context, **values: Any) -> Any:
        values.pop("version", None)
        return body(ctx, **values)

    function.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return function


def _parameter(option: Option) -> inspect.Parameter:
    if option.kind == REST:
        info: Any = typer.Argument(help=option.help, metavar=option.metavar)
        return _keyword(option.dest, Annotated[list[str], info], inspect.Parameter.empty)
    if option.kind == ARGUMENT:
        info = typer.Argument(help=option.help)
        return _keyword(option.dest, Annotated[Path | None, info], None)
    if option.kind == WORD:
        info = typer.Argument(help=option.help, metavar=option.metavar)
        return _keyword(option.dest, Annotated[str, info], inspect.Parameter.empty)
    kind: Any = {FLAG: bool, PATH: Path, MANY: list[str]}.get(option.kind, str)
    if option.kind == CHOICE:
        kind = Literal[option.choices]
    info = typer.Option(*option.flags, help=option.help, envvar=option.envvar, show_default=option.show_default)
    if option.required:
        return _keyword(option.dest, Annotated[kind, info], inspect.Parameter.empty)
    if option.default is None:
        kind = kind | None
    return _keyword(option.dest, Annotated[kind, info], option.default)


def _keyword(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"broker {__version__}")
        raise typer.Exit(0)
