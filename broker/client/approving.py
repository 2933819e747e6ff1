"""Approvals through the daemon: ``broker approvals | approve | deny``, and ``issue`` waiting for its approval.

A session that needs an approval is answered 202 with its request id and
digest (exit 8). Unless ``--no-wait``, the client then waits for the
decision in long-polls of ``POLL_SECONDS`` (``POST /v1/approvals/ID/wait``),
riding out a daemon restart (it asks again until its own deadline), and
collects the session once approved (``POST /v1/approvals/ID/collect``). A
decision made through the same daemon answers the wait at once.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from broker.client.answers import checked
from broker.vocab.errors import AwaitingApproval, DaemonUnreachable, PolicyDenied, UnknownRequest

if TYPE_CHECKING:
    import argparse

    from broker.daemon.transport import Answer

POLL_SECONDS = 25.0  # one long-poll: well inside any proxy's or client's idle limit
RETRY = 0.5  # a daemon that went away (restarting) is asked again this often


def call(socket: str, method: str, target: str, body: Any = None) -> Answer:
    from broker.daemon.transport import call as request

    return request(socket, method, target, body)


def wait_seconds(args: argparse.Namespace) -> float | None:
    """``--wait DURATION`` in seconds, 0 with ``--no-wait``, None (until the request expires) without either."""
    from broker.vocab.durations import parse_duration
    from broker.vocab.errors import UsageError

    if args.wait is not None and args.no_wait:
        raise UsageError("--wait and --no-wait exclude each other")
    if args.no_wait:
        return 0.0
    return float(parse_duration(args.wait, "--wait", UsageError)) if args.wait is not None else None


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
    from broker.cli.render import waiting_line

    sys.stderr.write(waiting_line(waiting.message, wait) + "\n")
    sys.stderr.flush()


def settle(socket: str, request: str, wait: float | None) -> None:
    """Return once ``request`` is approved; raise what its end means (8 still pending, 3 denied or expired)."""
    deadline = None if wait is None else time.monotonic() + wait
    unreachable: DaemonUnreachable | None = None
    while True:
        left = POLL_SECONDS if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            target = f"/v1/approvals/{quote(request, safe='')}/wait?seconds={min(left, POLL_SECONDS):.3f}"
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
    from broker.vocab.time import parse_iso, utcnow

    try:
        return parse_iso(str(item.get("expires_at"))) <= utcnow()
    except ValueError:
        return False


def collect(socket: str, request: str) -> dict[str, Any]:
    """The approved request's session document."""
    document: dict[str, Any] = checked(
        call(socket, "POST", f"/v1/approvals/{quote(request, safe='')}/collect")
    ).document
    return document


def run_approvals(command: str, args: argparse.Namespace, socket: str) -> int:
    """``broker approvals``, ``approve``, ``deny``."""
    if command == "approvals":
        found = _list(socket)
        if args.as_json:
            _print(found)
        else:
            from broker.cli.render import approval_lines
            from broker.vocab.time import utcnow

            _print("\n".join(approval_lines(found, utcnow())))
        return 0
    from broker.cli.render import decided_line
    from broker.vocab.session_ids import check_session_id

    request = check_session_id(args.request, "request id")
    body = {"digest": args.digest} if command == "approve" else {"reason": args.reason}
    decided = checked(call(socket, "POST", f"/v1/approvals/{request}/{command}", body)).document
    _print(decided if args.as_json else decided_line(decided, command))
    return 0


def _list(socket: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = checked(call(socket, "GET", "/v1/approvals")).document
    return found


def _print(value: Any) -> None:
    import json

    text = value if isinstance(value, str) else json.dumps(value, indent=2)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
