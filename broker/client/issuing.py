"""``broker issue`` through the daemon: the session document delivered (``--session-file``, then printed through
the command's renderer) while it can still be rolled back; a session that needs a person's approval is waited for
(``broker.client.approving``) and collected once approved. A delivery that fails revokes what was minted.
``--gateway`` asks the daemon's gateway to hold the session (``POST /v1/gateway/sessions``); once a person approved
it, the same request with ``resume`` collects it."""

from __future__ import annotations

from pathlib import Path

from broker.cli.sessions.launch_formats import SessionFile
from broker.client import approving
from broker.client.answers import checked
from broker.client.asking import manifest, render, session_id
from broker.commands.declaring import Command
from broker.daemon.transport import call
from broker.vocab.durations import wait_seconds
from broker.vocab.errors import BrokerError, IssueRolledBack, UsageError


def issue(command: Command, args: dict[str, object], socket: str) -> int:
    if (args["task"] is None) == (args["resume"] is None):
        raise UsageError("issue needs exactly one of --task FILE or --resume REQUEST")
    wait = wait_seconds(None if args["wait"] is None else str(args["wait"]), bool(args["no_wait"]))
    body = manifest(str(args["task"])) if args["task"] is not None else None
    target = SessionFile.open(Path(str(args["session_file"]))) if args["session_file"] is not None else None
    try:
        if args.get("gateway"):
            document = _gateway_session(socket, body, args, wait)
        else:
            document = _session(socket, body, args, wait)
        try:
            if target is not None:
                target.write(str(document["session"]))
            render(command, document, args)
        except BaseException as exc:  # the launcher never got the session: it must not stay live
            fate = _revoke_after_delivery(socket, str(document["session"]))
            reason = exc.message if isinstance(exc, BrokerError) else type(exc).__name__
            raise IssueRolledBack(f"issue failed after minting ({reason}); {fate}") from None
    finally:
        if target is not None:
            target.close()
    return 0


def _session(socket: str, body: object, args: dict[str, object], wait: float | None) -> dict[str, object]:
    """The session document of ``POST /v1/sessions`` (or of the approved request it waited for, or resumes)."""
    answer = call(socket, "POST", "/v1/sessions", body) if body is not None else None
    if answer is not None and answer.status != 202:
        document: dict[str, object] = checked(answer).document
        return document
    request = None if args["resume"] is None else session_id(args["resume"])  # --resume, or a person decides first
    if answer is not None:
        waiting = approving.pending(answer)
        approving.announce(socket, waiting, wait, bool(args["as_json"]))
        if wait == 0:
            raise waiting
        request = session_id(waiting.request)
    assert request is not None
    approving.settle(socket, request, wait)
    return approving.collect(socket, request)


def _gateway_session(socket: str, body: object, args: dict[str, object], wait: float | None) -> dict[str, object]:
    """The session document of ``POST /v1/gateway/sessions``; once a person approved it, asked again with
    ``resume`` (this command waits for the decision itself: ``--resume`` collects sessions issued without
    ``--gateway``)."""
    if body is None:
        raise UsageError("issue --gateway needs --task FILE: it waits for an approval itself (--wait)")
    request: dict[str, object] = {"manifest": body}
    answer = call(socket, "POST", "/v1/gateway/sessions", request)
    if answer.status == 202:  # nothing minted yet: a person decides first
        waiting = approving.pending(answer)
        approving.announce(socket, waiting, wait, bool(args["as_json"]))
        if wait == 0:
            raise waiting
        request["resume"] = session_id(waiting.request, "request id")
        approving.settle(socket, str(request["resume"]), wait)
        answer = call(socket, "POST", "/v1/gateway/sessions", request)
    document: dict[str, object] = checked(answer).document
    return document


def _revoke_after_delivery(socket: str, session: str) -> str:
    try:
        answer = call(socket, "DELETE", f"/v1/sessions/{session}")
    except BrokerError:
        return f"revoking {session} failed: broker sweep revokes it when it expires"
    if answer.status != 200 or answer.exit_code:
        return f"rollback left {session} pending for broker sweep"
    return "what was minted has been rolled back"
