"""The ``broker`` command line: parse, call the command, print. The error edge lives here and nowhere else.

A command line is parsed by the small parser of the command table
(``broker.cli.parsing``) and its command's module, named in the table, is
imported then: nothing else. What the small parser leaves alone (help pages,
shell completion, an unknown option) goes to the typer application made from
the same table (``broker.cli.typed``), which hands its values to the same
``execute``. A cold path (docs/architecture.md): the command's module and
typer are imported when chosen.

Errors of the ``BrokerError`` family are caught once, in ``main``, and shown
as one line ``broker: error: ...`` with the exit code of SPEC.md; anything
else is a bug (exit 1, traceback only with ``--debug``). Ctrl-C is one line
and exit 130, whichever parser ran the command.
"""

from __future__ import annotations

import importlib
import logging
import signal
import sys
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import FrameType

from broker.cli.context import Invocation, Read, print_error
from broker.cli.parsing import Parsed, parse
from broker.commands.declaring import ARGUMENT, PATH
from broker.host.process_hardening import MemoryLock, harden_process, lock_memory
from broker.telemetry.command import traced
from broker.vocab.errors import REPORT_URL, BrokerError, Interrupted
from broker.vocab.logs import configure, event

Route = Callable[[Parsed], "int | Read | None"]
INTERRUPTED = "interrupted; what was minted has been rolled back"


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def main(
    argv: list[str] | None = None,
    *,
    memory: MemoryLock | None = None,
    config: Read | None = None,
    route: Route | None = None,
) -> int:
    """Run one command line; its exit code.

    ``config`` is the config file's path and table when the console script read it already (looking for a daemon);
    ``route``, the console script's look for a daemon, is asked about a command only typer could parse (the small
    parser's commands were asked before): an int is the daemon's answer, else the config it read, or None.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    harden_process()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_interrupted)
    try:
        parsed = parse(args)
        if parsed is not None:
            return traced(partial(execute, parsed, memory, config))
        return traced(partial(_typer_main, args, memory, config, route))
    except KeyboardInterrupt:
        print_error(INTERRUPTED)
        return 130
    except BrokerError as exc:
        if debug and exc.exit_code == 1:
            traceback.print_exc()
        print_error(exc.message)
        return exc.exit_code
    except Exception as exc:  # a bug
        if debug:
            traceback.print_exc()
        print_error(
            f"internal error ({type(exc).__name__}); please report it at {REPORT_URL} (use --debug for details)"
        )
        return 1


def execute(parsed: Parsed, memory: MemoryLock | None, config: Read | None) -> int:
    """Run the parsed command: logging as the global options say, then its handler with its values."""
    options = parsed.options
    configure(bool(options["verbose"]), str(options["log_format"]))
    if memory is not None:
        log = logging.getLogger("broker.process")
        if memory.locked:
            event(log, "memory locked")
        else:
            event(log, "memory not locked: secrets may reach swap", reason=memory.detail)
    invocation = Invocation(
        config=_text(options["config"]), debug=bool(options["debug"]), read=config, command=parsed.command.name
    )
    module, _, name = parsed.command.handler.partition(":")
    handler = getattr(importlib.import_module(module), name)
    values = {
        option.dest: Path(str(value)) if option.kind in (PATH, ARGUMENT) and value is not None else value
        for option in parsed.command.options
        for value in [parsed.values[option.dest]]
    }
    code = handler(invocation, **values)
    return code if isinstance(code, int) else 0


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _typer_main(args: list[str], memory: MemoryLock | None, config: Read | None, route: Route | None) -> int:
    import typer

    from broker.cli.typed import Interrupted as TyperInterrupted
    from broker.cli.typed import build_app

    def run(parsed: Parsed) -> int:
        read = config
        if route is not None:
            routed = route(parsed)
            if isinstance(routed, int):
                return routed
            read = routed if routed is not None else config
        return execute(parsed, memory, read)

    try:
        result = build_app(run)(args=args, prog_name="broker", standalone_mode=False)
    except TyperInterrupted:
        print_error(INTERRUPTED)
        return 130
    except typer.Abort:
        print_error("aborted")
        return 130
    except typer.exceptions.TyperException as exc:  # usage errors from the parser
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        print_error(" ".join(message.split()))
        return 2
    return result if isinstance(result, int) else 0


def run() -> None:
    """The broker process: its memory is locked before anything is read (``main`` alone, in-process, is not)."""
    sys.exit(main(memory=lock_memory()))


if __name__ == "__main__":
    run()
