"""``broker issue | revoke | status | renew | exec | session | approvals | approve | deny | policy check``
through the daemon: same arguments, output, codes.

``route`` is asked about every command line the command table's parser
understood (``broker.cli.parsing``): a command the daemon answers
(``Command.daemon``), with ``BROKER_SOCKET`` or the config's ``[daemon]
socket`` set, runs here and its exit code comes back; anything else goes to
the full command line, with the config file's path and table when this
module read them (it is parsed once). A cold path (docs/architecture.md):
one request and one answer, so what a command prints with (the renderers, the
launch formats, the sandbox) is imported by that command only; the config
file is read only without ``BROKER_SOCKET``.
"""

from __future__ import annotations

import json
import os
import sys

from broker.cli.parsing import Parsed
from broker.cli.table import CONFIG_ENV, DEFAULT_CONFIG
from broker.client.answers import checked
from broker.daemon.transport import Answer, call
from broker.vocab.errors import (
    BrokerError,
    DaemonReported,
    IssueRolledBack,
    PolicyDenied,
    RevokeIncomplete,
    UsageError,
)

TYPE_CHECKING = False  # typing itself is not imported at run time: the client's cold path
if TYPE_CHECKING:
    from typing import Any

    Read = tuple[str, dict[str, Any]]  # the config file's path and TOML table

SOCKET_ENV = "BROKER_SOCKET"
MAX_CONFIG_BYTES = 256 * 1024


def route(parsed: Parsed) -> int | Read | None:
    """The exit code when the daemon ran the command; else the config file's path and table if read (or None)."""
    if not parsed.command.daemon:
        return None
    socket = os.environ.get(SOCKET_ENV)  # BROKER_SOCKET, else the config's [daemon] socket
    if not socket:
        read = read_config_table(parsed.options["config"])
        socket = daemon_socket(*read) if read is not None else None
        if socket is None:
            return read
    try:
        return _run(parsed.command.name, parsed.values, socket)
    except BrokerError as exc:
        sys.stderr.write(f"broker: error: {exc.message}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("broker: error: interrupted\n")
        return 130


def read_config_table(config: object) -> Read | None:
    """The config file named by ``--config``, ``BROKER_CONFIG`` or the default, and its TOML table (None when it
    cannot be read or is not TOML: the direct command line reports what is wrong with it)."""
    import tomllib

    from broker.vocab.files import read_bounded

    path = str(config or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)
    try:  # the one bounded reader: a FIFO or device named as the config is refused, never waited on
        data, _ = read_bounded(path, MAX_CONFIG_BYTES)
        return path, tomllib.loads(data.decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested too deeply
        return None


def daemon_socket(path: str, table: dict[str, Any]) -> str | None:
    """The config's ``[daemon] socket`` (relative to the config file), else None."""
    daemon = table.get("daemon")
    socket = daemon.get("socket") if isinstance(daemon, dict) else None
    if not isinstance(socket, str) or not socket:
        return None
    return socket if socket.startswith("/") else os.path.join(os.path.dirname(os.path.realpath(path)), socket)


def _run(command: str, args: dict[str, object], socket: str) -> int:
    if command == "issue":
        return _issue(args, socket)
    if command in ("approvals", "approve", "deny"):
        from broker.client.approving import run_approvals

        return run_approvals(command, args, socket)
    if command == "policy check":
        answer = call(socket, "POST", "/v1/policy/check", _manifest(str(args["task"])))
        decision = answer.document.get("decision", answer.document) if answer.status == 403 else answer.document
        if answer.status in (200, 403):
            _print(decision if args["as_json"] else _lines("decision_lines", decision))
        if answer.status == 403:
            raise PolicyDenied(str(answer.document.get("error", "denied by policy")))
        return checked(answer).exit_code
    if command == "revoke":
        return _revoke(args, socket)
    if command == "exec":
        from broker.client.executing import run_exec

        return run_exec(args, socket, _manifest(str(args["task"])))
    if command == "status":
        return _status(args, socket)
    if command in ("session allow", "session disallow"):
        return _network(args, socket, allow=command == "session allow")
    session = _session(args["session"])  # a checked id: nothing in it to quote
    answer = checked(call(socket, "POST", f"/v1/sessions/{session}/renew"))
    _print(answer.document if args["as_json"] else _lines("renew_lines", answer.document))
    if answer.exit_code == RevokeIncomplete.exit_code:
        from broker.cli.render import RENEW_PENDING

        raise RevokeIncomplete(RENEW_PENDING)
    if answer.exit_code:  # a running exec's renewal denied or failed (as broker.core.running.forcing says it)
        done = answer.document if isinstance(answer.document, list) else []
        item: dict[str, Any] = next((i for i in done if i.get("outcome") in ("denied", "failed", "cannot")), {})
        what = f"renewal of {item.get('name', '')!r} {item.get('outcome', 'failed')}: {item.get('reason', '')}"
        raise DaemonReported(what, answer.exit_code)
    return 0


def _network(args: dict[str, object], socket: str, *, allow: bool) -> int:
    session = _session(args["session"])  # a checked id: nothing in it to quote
    body = {"destination": str(args["destination"]), "allow": allow}
    answer = checked(call(socket, "POST", f"/v1/sessions/{session}/network", body))
    _print(answer.document if args["as_json"] else _lines("network_lines", answer.document))
    return 0


def _status(args: dict[str, object], socket: str) -> int:
    query = "?all=1" if args["show_all"] else ""
    query += ("&" if query else "?") + "budgets=1" if args["as_json"] else ""
    answer = checked(call(socket, "GET", "/v1/sessions" + query))
    if args["as_json"]:
        _print(answer.document)
    elif not answer.document:
        _print("no live sessions" if not args["show_all"] else "no sessions")
    else:
        from broker.cli.output import print_table
        from broker.cli.render import STATUS_COLUMNS, status_rows
        from broker.vocab.time import utcnow

        print_table(STATUS_COLUMNS, status_rows(answer.document, utcnow()))
    return 0


def _issue(args: dict[str, object], socket: str) -> int:
    from pathlib import Path

    from broker.cli.render import issue_text
    from broker.cli.sessions.launch_formats import SessionFile, emit, render
    from broker.vocab.durations import wait_seconds

    if (args["task"] is None) == (args["resume"] is None):
        raise UsageError("issue needs exactly one of --task FILE or --resume REQUEST")
    wait = wait_seconds(None if args["wait"] is None else str(args["wait"]), bool(args["no_wait"]))
    body = _manifest(str(args["task"])) if args["task"] is not None else None
    target = SessionFile.open(Path(str(args["session_file"]))) if args["session_file"] is not None else None
    try:
        answer = call(socket, "POST", "/v1/sessions", body) if body is not None else None
        document: dict[str, object]
        if answer is None or answer.status == 202:  # --resume, or nothing minted yet: a person decides first
            from broker.client import approving

            request = None if args["resume"] is None else _session(args["resume"])
            if answer is not None:
                waiting = approving.pending(answer)
                approving.announce(socket, waiting, wait, bool(args["as_json"]))
                if wait == 0:
                    raise waiting
                request = _session(waiting.request)
            assert request is not None
            approving.settle(socket, request, wait)
            document = approving.collect(socket, request)
        else:
            document = checked(answer).document
        try:
            if target is not None:
                target.write(str(document["session"]))
            if args["as_json"] or args["fmt"] is not None:
                emit(render(document, str(args["fmt"] or "json")))
            else:
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


def _revoke(args: dict[str, object], socket: str) -> int:
    if (args["session"] is None) == (args["task"] is None):
        raise UsageError("revoke needs exactly one of --session ID or --task NAME")
    answer: Answer
    if args["session"] is not None:
        session = _session(args["session"])
        answer = checked(call(socket, "DELETE", f"/v1/sessions/{session}"))
        reports = [answer.document]
    else:
        from urllib.parse import quote

        answer = checked(call(socket, "DELETE", f"/v1/sessions?task={quote(str(args['task']), safe='')}"))
        reports = answer.document
    _print(answer.document if args["as_json"] else _lines("revoke_lines", reports))
    if answer.exit_code:
        from broker.cli.render import revoke_incomplete

        raise RevokeIncomplete(revoke_incomplete(list(answer.incomplete)))
    return 0


def _session(value: object) -> str:
    from broker.vocab.session_ids import check_session_id

    session = str(value)
    check_session_id(session)
    return session


def _manifest(source: str) -> object:
    """The manifest read and parsed here, with the caller's own rights; the daemon gets it as JSON."""
    from broker.core.inputs.strictdata import read_task_file
    from broker.vocab.errors import ManifestError

    task = read_task_file(source)
    document = task.document()
    try:
        json.dumps(document)
    except (TypeError, ValueError):
        raise ManifestError(f"{task.what}: holds a value JSON cannot carry (a date, a binary string)") from None
    return document


def _lines(renderer: str, document: object) -> str:
    from broker.cli import render

    lines: list[str] = getattr(render, renderer)(document)
    return "\n".join(lines)


def _print(value: object) -> None:
    text = value if isinstance(value, str) else json.dumps(value, indent=2)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
