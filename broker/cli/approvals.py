"""``broker approvals | approve | deny``, and what ``issue`` and ``exec`` do while a session awaits its approval."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from broker.cli.context import load_config, open_broker, print_json
from broker.vocab.errors import AwaitingApproval, UsageError

if TYPE_CHECKING:
    from broker.core.broker import Broker


def approvals(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the requests as JSON.")] = False,
) -> None:
    """List the approval requests waiting for a decision: what each would mint, who may approve, its digest.

    Example: broker approvals
    """
    from broker.cli.render import approval_lines
    from broker.core.approvals.deciding import visible
    from broker.core.approvals.ticket import request_json
    from broker.vocab.time import utcnow

    config = load_config(ctx)
    with open_broker(config) as broker:
        found = [request_json(a) for a in visible(broker, sees_all=True)]  # direct mode: the store is the caller's
    if as_json:
        print_json(found)
        return
    for line in approval_lines(found, utcnow()):
        typer.echo(line)


def approve(
    ctx: typer.Context,
    request: Annotated[str, typer.Argument(help="The request id (broker approvals lists them).")],
    digest: Annotated[str, typer.Option("--digest", help="The request's SHA-256 digest, as you were shown it.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the decided request as JSON.")] = False,
) -> None:
    """Approve a request: the digest must be the one you were shown, so the approval binds to exactly that request.

    You must be one of its approvers (by uid or group) and not its requester.
    Example: broker approve s-4k2j9x7q3m1p --digest 3f5e...
    """
    _decide(ctx, "approve", request, digest, as_json)


def deny(
    ctx: typer.Context,
    request: Annotated[str, typer.Argument(help="The request id (broker approvals lists them).")],
    reason: Annotated[str | None, typer.Option("--reason", help="Why, for the requester and the log.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the decided request as JSON.")] = False,
) -> None:
    """Deny a request (or, as its requester, withdraw it): nothing is minted for it.

    Example: broker deny s-4k2j9x7q3m1p --reason "not during the freeze"
    """
    _decide(ctx, "deny", request, reason, as_json)


def _decide(ctx: typer.Context, action: str, request: str, value: str | None, as_json: bool) -> None:
    from broker.cli.render import decided_line
    from broker.core.approvals.deciding import approve as approve_request
    from broker.core.approvals.deciding import deny as deny_request
    from broker.core.approvals.ticket import request_json

    config = load_config(ctx)
    with open_broker(config) as broker:
        if action == "approve":
            assert value is not None
            decided = request_json(approve_request(broker, request, value))
        else:
            decided = request_json(deny_request(broker, request, value))
    if as_json:
        print_json(decided)
    else:
        typer.echo(decided_line(decided, action))


def wait_seconds(wait: str | None, no_wait: bool) -> float | None:
    """``--wait DURATION`` in seconds, 0 with ``--no-wait``, None (the request's own timeout) without either."""
    from broker.vocab.durations import parse_duration

    if wait is not None and no_wait:
        raise UsageError("--wait and --no-wait exclude each other")
    if no_wait:
        return 0.0
    return float(parse_duration(wait, "--wait", UsageError)) if wait is not None else None


def pending_notice(broker: Broker, pending: AwaitingApproval, wait: float | None, as_json: bool) -> None:
    """Say that the session waits for its approval: on stderr while waiting; with ``--no-wait`` also the request
    as JSON on stdout (``--json``), before the exit-8 line."""
    from broker.cli.render import waiting_line
    from broker.core.approvals.ticket import request_json

    if wait == 0:
        if as_json:
            found = broker.store.get_approval(pending.request)
            print_json(request_json(found) if found is not None else {"request": pending.request})
        return
    sys.stderr.write(waiting_line(pending.message, wait) + "\n")
    sys.stderr.flush()


def register(app: typer.Typer) -> None:
    """Add the approval commands to the main application, in help order."""
    app.command()(approvals)
    app.command()(approve)
    app.command()(deny)
