"""The ``broker`` command line: parse, call the core, print. Nothing else lives here.

Errors of the ``BrokerError`` family are caught once, in ``main``, and shown
as one line ``broker: error: ...`` with the exit code of SPEC.md; anything
else is a bug (exit 1, traceback only with ``--debug``).
"""

from __future__ import annotations

import signal
import sys
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from broker import __version__
from broker.cli import coercion
from broker.cli.audit import audit_app
from broker.cli.context import Options, Start, print_error
from broker.cli.network import session_app
from broker.cli.ops import register_ops
from broker.cli.policy import policy_app
from broker.cli.sessions import register as register_sessions
from broker.host.process_hardening import MemoryLock, harden_process, lock_memory
from broker.vocab.errors import REPORT_URL, BrokerError, Interrupted

coercion.install()
app = typer.Typer(
    name="broker",
    help="Scoped-credential broker: short-lived, narrow credentials for sandboxed agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
register_ops(app)  # the order here is the order of ``broker --help``
register_sessions(app)
app.add_typer(session_app, name="session")
app.add_typer(policy_app, name="policy")
app.add_typer(audit_app, name="audit")


class LogFormat(StrEnum):
    text = "text"
    json = "json"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"broker {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_options(
    ctx: typer.Context,
    config: Annotated[
        str | None,
        typer.Option("--config", envvar="BROKER_CONFIG", help="Config file [default: /etc/broker/broker.toml]."),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for internal errors.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log the policy decision and every provider call to stderr.")
    ] = False,
    log_format: Annotated[LogFormat, typer.Option("--log-format", help="Format of stderr logs.")] = LogFormat.text,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    start = ctx.obj if isinstance(ctx.obj, Start) else Start()  # from run(): the memory lock, the config read
    memory = start.memory
    ctx.obj = Options(config=config, debug=debug, read=start.config)
    import logging

    from broker.vocab.logs import configure, event

    configure(verbose, log_format.value)
    if memory is not None:
        log = logging.getLogger("broker.process")
        if memory.locked:
            event(log, "memory locked")
        else:
            event(log, "memory not locked: secrets may reach swap", reason=memory.detail)


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def _print_traceback() -> None:
    import traceback  # only with --debug

    traceback.print_exc()


def main(
    argv: list[str] | None = None,
    *,
    memory: MemoryLock | None = None,
    config: tuple[Path, dict[str, Any]] | None = None,
) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    harden_process()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_interrupted)
    try:
        result = app(args=args, prog_name="broker", standalone_mode=False, obj=Start(memory, config))
    except typer.Abort:
        print_error("aborted")
        return 130
    except typer.exceptions.TyperException as exc:  # usage errors from the parser
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        print_error(" ".join(message.split()))
        return 2
    except KeyboardInterrupt:
        print_error("interrupted; what was minted has been rolled back")
        return 130
    except BrokerError as exc:
        if debug and exc.exit_code == 1:
            _print_traceback()
        print_error(exc.message)
        return exc.exit_code
    except Exception as exc:  # a bug
        if debug:
            _print_traceback()
        print_error(
            f"internal error ({type(exc).__name__}); please report it at {REPORT_URL} (use --debug for details)"
        )
        return 1
    return result if isinstance(result, int) else 0


def run() -> None:
    """The broker process: its memory is locked before anything is read (``main`` alone, in-process, is not)."""
    sys.exit(main(memory=lock_memory()))


if __name__ == "__main__":
    run()
