"""``broker issue``: decide, mint, inject and log; deliver the session document while it can still roll back.

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


def issue(run: Invocation, task: str, as_json: bool, fmt: str | None, session_file: Path | None) -> None:
    config = run.load_config()
    manifest = load_manifest(task, config)
    warm_up(config, {request.provider for request in manifest.credentials}, minting=True)  # handshakes meanwhile
    from broker.cli.launch_formats import SessionFile, emit, render
    from broker.cli.render import issue_text
    from broker.core.issuing import issuing

    target = SessionFile.open(session_file) if session_file is not None else None  # before anything is minted
    try:
        with open_broker(config) as broker, issuing(broker, manifest) as session:
            # While the session can still be rolled back: any failure here revokes it (exit 4).
            if target is not None:
                target.write(session.id)
            document = session.to_json()
            if as_json or fmt is not None:
                emit(render(document, fmt or "json"))
            else:
                emit(issue_text(document))
    finally:
        if target is not None:
            target.close()
