"""Approvals through the daemon: ``broker approvals | approve | deny``, and ``issue`` waiting for its approval.

A session that needs an approval is answered 202 with its request id and
digest (exit 8). Unless ``--no-wait``, the client then waits for the
decision in long-polls of ``POLL_SECONDS`` (``POST /v1/approvals/ID/wait``),
riding out a daemon restart (it asks again until its own deadline), and
collects the session once approved (``POST /v1/approvals/ID/collect``). A
decision made through the same daemon answers the wait at once.
"""

from __future__ import annotations

import json
import sys
import time

from broker.cli.render import waiting_line
from broker.client.answers import checked
from broker.client.asking import render, session_id
from broker.commands.declaring import Command
from broker.daemon.transport import Answer, call
from broker.vocab.errors import AwaitingApproval, DaemonUnreachable, PolicyDenied, UnknownRequest
from broker.vocab.time import parse_iso, utcnow

TYPE_CHECKING = False  # typing itself is not imported at run time: the client's cold path
if TYPE_CHECKING:
    from typing import Any

POLL_SECONDS = 25.0  # one long-poll: well inside any proxy's or client's idle limit
RETRY = 0.5  # a daemon that went away (restarting) is asked again this often


def pending(answer: Answer) -> AwaitingApproval:
    """The exit-8 error a 202 answer carries."""
    document = answer.document if isinstance(answer.document, dict) else {}
    return AwaitingApproval(
        str(document.get("error", "awaiting approval")), str(document.get("request", "")), str(document.get("digest"))
    )


def announce(socket: str, waiting: AwaitingApproval, wait: float | None, as_json: bool) -> None:
    """While waiting: one line on stderr. With ``--no-wait`` and ``--json``: the request as JSON on stdout."""
    if wait == 0:
        if as_json:
            found = [a for a in _list(socket) if a.get("request") == waiting.request]
            _print(found[0] if found else {"request": waiting.request, "digest": waiting.digest})
        return
    sys.stderr.write(waiting_line(waiting.message, wait) + "\n")
    sys.stderr.flush()


def settle(socket: str, request: str, wait: float | None) -> None:
    """Return once ``request`` is approved; raise what its end means (8 still pending, 3 denied or expired)."""
    deadline = None if wait is None else time.monotonic() + wait
    unreachable: DaemonUnreachable | None = None
    while True:
        left = POLL_SECONDS if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            target = f"/v1/approvals/{request}/wait?seconds={min(left, POLL_SECONDS):.3f}"
            item = checked(call(socket, "POST", target)).document
            unreachable = None
        except DaemonUnreachable as exc:  # restarting: ask again until the deadline
            unreachable, item = exc, None
        if item is not None and item.get("state") != "pending":
            _settled(item)
            return
        if deadline is not None and time.monotonic() >= deadline:
            if unreachable is not None:
                raise unreachable
            raise AwaitingApproval(
                f"still awaiting approval: request {request}; once approved: broker issue --resume {request}",
                request,
                str(item.get("digest")) if item else "",
            )
        if item is not None and deadline is None and _expired(item):
            continue  # the daemon expires it on the next wait
        if unreachable is not None:
            time.sleep(RETRY)


def _settled(item: dict[str, Any]) -> None:
    request, state = item.get("request"), item.get("state")
    if state == "granted":
        return
    if state == "denied":
        because = f": {item['reason']}" if item.get("reason") else ""
        raise PolicyDenied(f"request {request} was denied by {item.get('decided_by')}{because}; nothing was minted")
    if state == "expired":
        raise PolicyDenied(
            f"request {request} expired at {item.get('expires_at')} without being approved and collected"
        )
    if state == "collected":
        raise UnknownRequest(f"request {request} was collected already: its session is {request}")
    raise UnknownRequest(f"request {request} was {state}")


def _expired(item: dict[str, Any]) -> bool:
    try:
        return parse_iso(str(item.get("expires_at"))) <= utcnow()
    except ValueError:
        return False


def collect(socket: str, request: str) -> dict[str, Any]:
    """The approved request's session document (``request``: a checked id, nothing in it to quote)."""
    document: dict[str, Any] = checked(call(socket, "POST", f"/v1/approvals/{request}/collect")).document
    return document


def approvals(command: Command, args: dict[str, object], socket: str) -> int:
    """``broker approvals``: the open requests this caller may decide or asked for."""
    render(command, _list(socket), args)
    return 0


def approve(command: Command, args: dict[str, object], socket: str) -> int:
    return _decide(command, args, socket, "approve", {"digest": args["digest"]})


def deny(command: Command, args: dict[str, object], socket: str) -> int:
    return _decide(command, args, socket, "deny", {"reason": args["reason"]})


def _decide(command: Command, args: dict[str, object], socket: str, action: str, body: dict[str, object]) -> int:
    request = session_id(args["request"], "request id")
    render(command, checked(call(socket, "POST", f"/v1/approvals/{request}/{action}", body)).document, args)
    return 0


def _list(socket: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = checked(call(socket, "GET", "/v1/approvals")).document
    return found


def _print(value: Any) -> None:
    text = value if isinstance(value, str) else json.dumps(value, indent=2)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
