"""``broker issue``: decide, mint, inject and log; deliver the session document while it can still roll back.

A session whose rule needs a person's approval is opened ``awaiting-approval``:
issue waits for the decision on the store (``--wait``, by default until the
request expires), or exits 8 with ``--no-wait``; ``--resume REQUEST``
collects the session once approved.

``--gateway`` is the daemon's alone: the gateway runs in ``broker serve``, which
must hold the session as long as it lives (its secrets are in that process), so
a direct issue refuses it before anything is minted, naming the setting that
makes issue go through the daemon.

A cold path (docs/architecture.md): the providers' handshakes start as soon
as the manifest names them, and the rest of the command (the transaction,
the output formats) is imported while they run.
"""

from __future__ import annotations

from pathlib import Path

from broker.cli.context import Invocation
from broker.cli.opening import open_broker
from broker.core.inputs.manifest import load_manifest
from broker.core.warming import warm_up
from broker.vocab.durations import wait_seconds
from broker.vocab.errors import UsageError
from broker.vocab.tracing import annotate


def issue(
    run: Invocation,
    task: str | None,
    as_json: bool,
    fmt: str | None,
    session_file: Path | None,
    wait: str | None,
    no_wait: bool,
    resume: str | None,
    gateway: bool = False,
) -> None:
    if (task is None) == (resume is None):
        raise UsageError("issue needs exactly one of --task FILE or --resume REQUEST")
    if gateway:
        raise UsageError(
            "issue --gateway: the gateway runs in broker serve, which holds the session; set [daemon] socket in the"
            " config (or BROKER_SOCKET) so issue goes through it"
        )
    seconds = wait_seconds(wait, no_wait)
    config = run.load_config()
    manifest = None
    if task is not None:
        manifest = load_manifest(task, config)
        warm_up(config, {request.provider for request in manifest.credentials}, minting=True)  # handshakes meanwhile
    from broker.cli.sessions.launch_formats import SessionFile
    from broker.cli.sessions.waiting import pending_notice
    from broker.core.approvals.settling import settle
    from broker.core.issuing import issuing
    from broker.core.issuing.resuming import resuming
    from broker.vocab.errors import AwaitingApproval

    target = SessionFile.open(session_file) if session_file is not None else None  # before anything is minted
    try:
        with open_broker(config) as broker:
            request = resume
            if manifest is not None:
                try:
                    with issuing(broker, manifest) as session:
                        annotate(session=session.id, task=session.task)  # on the command's trace, when tracing is on
                        _deliver(session.to_json(), target, as_json, fmt)  # a failure here revokes it (exit 4)
                    return
                except AwaitingApproval as pending:
                    pending_notice(broker, pending, seconds, as_json)
                    if seconds == 0:
                        raise
                    request = pending.request
            assert request is not None
            settle(broker, request, wait=seconds)
            with resuming(broker, request) as session:
                annotate(session=session.id, task=session.task)
                _deliver(session.to_json(), target, as_json, fmt)
    finally:
        if target is not None:
            target.close()


def _deliver(document: dict[str, object], target: object, as_json: bool, fmt: str | None) -> None:
    """Print the session document (or its launcher format), and write ``--session-file``."""
    from broker.cli.sessions.launch_formats import SessionFile, show

    if isinstance(target, SessionFile):
        target.write(str(document["session"]))
    show(document, {"as_json": as_json, "fmt": fmt})
