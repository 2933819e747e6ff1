"""``broker issue | revoke | status | renew | exec | policy check`` through the daemon: same arguments, output, codes.

``thin_client`` answers ``Direct`` when this invocation is not the daemon's (no
socket configured, another command, or ``--help``): ``broker.entry`` then runs
the full command line, handing it the config file's table when this module
read it. Options are parsed with argparse, not typer, so a
launcher's call costs little more than starting Python.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote

from broker.client.answers import checked
from broker.vocab.errors import BrokerError, IssueRolledBack, PolicyDenied, RevokeIncomplete, UsageError

SOCKET_ENV = "BROKER_SOCKET"
CONFIG_ENV = "BROKER_CONFIG"
DEFAULT_CONFIG = "/etc/broker/broker.toml"
MAX_CONFIG_BYTES = 256 * 1024
FORMATS = ("json", "env", "docker", "podman", "bwrap")
COMMANDS = ("issue", "revoke", "status", "renew", "exec", "policy check")

if TYPE_CHECKING:
    from broker.daemon.transport import Answer


def call(socket: str, method: str, target: str, body: Any = None) -> Answer:
    from broker.daemon.transport import call as request

    return request(socket, method, target, body)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _global_options(args: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = _Parser(prog="broker", add_help=False, allow_abbrev=False)
    parser.add_argument("--config", default=None)
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--verbose", "-v", action="store_true")
    parser.add_argument("--log-format", choices=("text", "json"), default="text")
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    found = parser.parse_args(args)
    return found, list(found.rest)


def _command_parser(command: str) -> _Parser:
    parser = _Parser(prog=f"broker {command}", add_help=False, allow_abbrev=False)
    if command in ("issue", "policy check"):
        parser.add_argument("--task", required=True)
        parser.add_argument("--json", dest="as_json", action="store_true")
    if command == "issue":
        parser.add_argument("--format", dest="fmt", choices=FORMATS, default=None)
        parser.add_argument("--session-file", default=None)
    elif command == "revoke":
        parser.add_argument("--session", default=None)
        parser.add_argument("--task", default=None)
        parser.add_argument("--json", dest="as_json", action="store_true")
    elif command == "status":
        parser.add_argument("--json", dest="as_json", action="store_true")
        parser.add_argument("--all", dest="show_all", action="store_true")
    elif command == "renew":
        parser.add_argument("--session", required=True)
        parser.add_argument("--json", dest="as_json", action="store_true")
    elif command == "exec":
        from broker.client.running import add_options

        add_options(parser)
    return parser


@dataclass(frozen=True)
class Direct:
    """This invocation is not the daemon's: the full command line runs it.

    ``config`` is the config file's path and TOML table when the look for
    ``[daemon] socket`` read them, so that the command line parses the file
    once, not twice.
    """

    config: tuple[Path, dict[str, Any]] | None = None


def read_config_table(config: str | None) -> tuple[Path, dict[str, Any] | None]:
    """The config file named by ``--config``, ``BROKER_CONFIG`` or the default, and its TOML table (None when it
    cannot be read or is not TOML: the direct command line reports what is wrong with it)."""
    import tomllib  # only here: with BROKER_SOCKET set, the client never reads the config

    from broker.vocab.files import read_bounded

    path = Path(config or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)
    try:  # the one bounded reader: a FIFO or device named as the config is refused, never waited on
        data, _ = read_bounded(path, MAX_CONFIG_BYTES)
        return path, tomllib.loads(data.decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested too deeply
        return path, None


def daemon_socket(path: Path, table: dict[str, Any]) -> str | None:
    """The config's ``[daemon] socket`` (relative to the config file), else None."""
    daemon = table.get("daemon")
    socket = daemon.get("socket") if isinstance(daemon, dict) else None
    if not isinstance(socket, str) or not socket:
        return None
    return socket if socket.startswith("/") else str(path.resolve().parent / socket)


def thin_client(args: list[str]) -> int | Direct:
    """Run a session command through the daemon and return its exit code; ``Direct`` when this is not one."""
    try:
        options, rest = _global_options(args)
    except UsageError:
        return Direct()
    command = " ".join(rest[:2]) if rest[:1] == ["policy"] else " ".join(rest[:1])
    own = rest[: rest.index("--")] if "--" in rest else rest  # after --, exec's command has its own options
    if command not in COMMANDS or {"-h", "--help"} & set(own):
        return Direct()
    socket = os.environ.get(SOCKET_ENV)  # BROKER_SOCKET, else the config's [daemon] socket
    if not socket:
        path, table = read_config_table(options.config)
        socket = daemon_socket(path, table) if table is not None else None
        if socket is None:
            return Direct((path, table) if table is not None else None)
    try:
        parsed = _command_parser(command).parse_args(rest[len(command.split()) :])
        return _run(command, parsed, socket)
    except BrokerError as exc:
        sys.stderr.write(f"broker: error: {exc.message}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("broker: error: interrupted\n")
        return 130


def _run(command: str, args: argparse.Namespace, socket: str) -> int:
    if command == "issue":
        return _issue(args, socket)
    if command == "policy check":
        answer = call(socket, "POST", "/v1/policy/check", _manifest(args.task))
        decision = answer.document.get("decision", answer.document) if answer.status == 403 else answer.document
        if answer.status in (200, 403):
            _print(decision if args.as_json else _lines("decision_lines", decision))
        if answer.status == 403:
            raise PolicyDenied(str(answer.document.get("error", "denied by policy")))
        return checked(answer).exit_code
    if command == "revoke":
        return _revoke(args, socket)
    if command == "exec":
        from broker.client.running import run_exec

        return run_exec(args, socket, _manifest(args.task))
    if command == "status":
        query = "?all=1" if args.show_all else ""
        query += ("&" if query else "?") + "budgets=1" if args.as_json else ""
        answer = checked(call(socket, "GET", "/v1/sessions" + query))
        if args.as_json:
            _print(answer.document)
        elif not answer.document:
            _print("no live sessions" if not args.show_all else "no sessions")
        else:
            from broker.cli.output import print_table
            from broker.cli.render import STATUS_COLUMNS, status_rows
            from broker.vocab.time import utcnow

            print_table(STATUS_COLUMNS, status_rows(answer.document, utcnow()))
        return 0
    _check_session(args.session)
    answer = checked(call(socket, "POST", f"/v1/sessions/{quote(args.session, safe='')}/renew"))
    _print(answer.document if args.as_json else _lines("renew_lines", answer.document))
    if answer.exit_code:
        from broker.cli.render import RENEW_PENDING

        raise RevokeIncomplete(RENEW_PENDING)
    return 0


def _issue(args: argparse.Namespace, socket: str) -> int:
    from broker.cli.launch_formats import SessionFile, emit, render

    body = _manifest(args.task)
    target = SessionFile.open(Path(args.session_file)) if args.session_file is not None else None
    try:
        answer = checked(call(socket, "POST", "/v1/sessions", body))
        document: dict[str, Any] = answer.document
        try:
            if target is not None:
                target.write(document["session"])
            if args.as_json or args.fmt is not None:
                emit(render(document, args.fmt or "json"))
            else:
                from broker.cli.render import issue_text

                emit(issue_text(document))
        except BaseException as exc:  # the launcher never got the session: it must not stay live
            fate = _revoke_after_delivery(socket, str(document["session"]))
            reason = exc.message if isinstance(exc, BrokerError) else type(exc).__name__
            raise IssueRolledBack(f"issue failed after minting ({reason}); {fate}") from None
    finally:
        if target is not None:
            target.close()
    return 0


def _revoke_after_delivery(socket: str, session: str) -> str:
    try:
        answer = call(socket, "DELETE", f"/v1/sessions/{session}")
    except BrokerError:
        return f"revoking {session} failed: broker sweep revokes it when it expires"
    if answer.status != 200 or answer.exit_code:
        return f"rollback left {session} pending for broker sweep"
    return "what was minted has been rolled back"


def _revoke(args: argparse.Namespace, socket: str) -> int:
    if (args.session is None) == (args.task is None):
        raise UsageError("revoke needs exactly one of --session ID or --task NAME")
    if args.session is not None:
        _check_session(args.session)
        answer = checked(call(socket, "DELETE", f"/v1/sessions/{args.session}"))
        reports = [answer.document]
    else:
        answer = checked(call(socket, "DELETE", f"/v1/sessions?task={quote(args.task, safe='')}"))
        reports = answer.document
    _print(answer.document if args.as_json else _lines("revoke_lines", reports))
    if answer.exit_code:
        from broker.cli.render import revoke_incomplete

        raise RevokeIncomplete(revoke_incomplete(list(answer.incomplete)))
    return 0


def _check_session(session: str) -> None:
    from broker.vocab.session_ids import check_session_id

    check_session_id(session)


def _manifest(source: str) -> Any:
    """The manifest read and parsed here, with the caller's own rights; the daemon gets it as JSON."""
    import json

    from broker.core.inputs.strictdata import read_task_file
    from broker.vocab.errors import ManifestError

    task = read_task_file(source)
    document = task.document()
    try:
        json.dumps(document)
    except (TypeError, ValueError):
        raise ManifestError(f"{task.what}: holds a value JSON cannot carry (a date, a binary string)") from None
    return document


def _lines(renderer: str, document: Any) -> str:
    from broker.cli import render

    lines: list[str] = getattr(render, renderer)(document)
    return "\n".join(lines)


def _print(value: Any) -> None:
    import json

    text = value if isinstance(value, str) else json.dumps(value, indent=2)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
