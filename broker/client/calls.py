"""The thin client's one-request commands: ``revoke``, ``status``, ``renew``, ``session allow|disallow`` and
``policy check``, each a request to the route the command table declares and its answer printed through the
command's renderer; the exit code as the direct command ends with.

Each call takes the command (its table entry), the values the table's parser read and the daemon's socket.
"""

from __future__ import annotations

from broker.client.answers import checked
from broker.client.asking import manifest, render, session_id
from broker.commands.declaring import Command
from broker.daemon.transport import Answer, call
from broker.vocab.errors import DaemonReported, PolicyDenied, RevokeIncomplete, UsageError

TYPE_CHECKING = False  # typing itself is not imported at run time: the client's cold path
if TYPE_CHECKING:
    from typing import Any


def revoke(command: Command, args: dict[str, object], socket: str) -> int:
    if (args["session"] is None) == (args["task"] is None):
        raise UsageError("revoke needs exactly one of --session ID or --task NAME")
    answer: Answer
    if args["session"] is not None:
        answer = checked(call(socket, "DELETE", f"/v1/sessions/{session_id(args['session'])}"))
    else:
        from urllib.parse import quote

        answer = checked(call(socket, "DELETE", f"/v1/sessions?task={quote(str(args['task']), safe='')}"))
    render(command, answer.document, args)
    if answer.exit_code:
        from broker.cli.render import revoke_incomplete

        raise RevokeIncomplete(revoke_incomplete(list(answer.incomplete)))
    return 0


def status(command: Command, args: dict[str, object], socket: str) -> int:
    query = "?all=1" if args["show_all"] else ""
    query += ("&" if query else "?") + "budgets=1" if args["as_json"] else ""
    render(command, checked(call(socket, "GET", "/v1/sessions" + query)).document, args)
    return 0


def renew(command: Command, args: dict[str, object], socket: str) -> int:
    answer = checked(call(socket, "POST", f"/v1/sessions/{session_id(args['session'])}/renew"))
    render(command, answer.document, args)
    if answer.exit_code == RevokeIncomplete.exit_code:
        from broker.cli.render import RENEW_PENDING

        raise RevokeIncomplete(RENEW_PENDING)
    if answer.exit_code:  # a running exec's renewal denied or failed (as broker.core.running.forcing says it)
        done = answer.document if isinstance(answer.document, list) else []
        item: dict[str, Any] = next((i for i in done if i.get("outcome") in ("denied", "failed", "cannot")), {})
        what = f"renewal of {item.get('name', '')!r} {item.get('outcome', 'failed')}: {item.get('reason', '')}"
        raise DaemonReported(what, answer.exit_code)
    return 0


def allow(command: Command, args: dict[str, object], socket: str) -> int:
    return _network(command, args, socket, allow=True)


def disallow(command: Command, args: dict[str, object], socket: str) -> int:
    return _network(command, args, socket, allow=False)


def _network(command: Command, args: dict[str, object], socket: str, *, allow: bool) -> int:
    body = {"destination": str(args["destination"]), "allow": allow}
    answer = checked(call(socket, "POST", f"/v1/sessions/{session_id(args['session'])}/network", body))
    render(command, answer.document, args)
    return 0


def check(command: Command, args: dict[str, object], socket: str) -> int:
    """``policy check``: the decision printed allowed or denied; a denial is exit 3 with its reasons."""
    answer = call(socket, "POST", "/v1/policy/check", manifest(str(args["task"])))
    decision = answer.document.get("decision", answer.document) if answer.status == 403 else answer.document
    if answer.status in (200, 403):
        render(command, decision, args)
    if answer.status == 403:
        raise PolicyDenied(str(answer.document.get("error", "denied by policy")))
    return checked(answer).exit_code


def published(command: Command, args: dict[str, object], socket: str) -> int:
    """``identity jwks|discovery|revoked``: the document the daemon publishes at the command's one route."""
    render(command, checked(call(socket, "GET", command.routes[0].path)).document, args)
    return 0
