"""``broker exec``: issue, run the command with only its credentials, revoke when it ends; its exit status.

A session that needs a person's approval first waits for it as ``issue`` does (``--wait``, ``--no-wait``).
"""

from __future__ import annotations

from pathlib import Path

from broker.cli.context import Invocation
from broker.cli.opening import open_broker
from broker.cli.render import exec_ended
from broker.cli.sessions.waiting import pending_notice
from broker.core.executing import ExecOptions, check_sandbox_available, execute
from broker.core.inputs.manifest import load_manifest
from broker.vocab.durations import wait_seconds
from broker.vocab.errors import AwaitingApproval


def run(
    invocation: Invocation,
    command: list[str],
    task: str,
    sandbox: str,
    image: str | None,
    network: str | None,
    workspace: Path | None,
    read_only: list[str],
    wait: str | None,
    no_wait: bool,
) -> int:
    seconds = wait_seconds(wait, no_wait)
    options = ExecOptions(
        command=tuple(command),
        sandbox=sandbox,
        network=network,
        workspace=workspace,
        read_only=tuple(read_only),
        image=image,
    )
    config = invocation.load_config()
    manifest = load_manifest(task, config)
    check_sandbox_available(options, manifest)
    with open_broker(config) as broker:

        def notice(pending: AwaitingApproval) -> None:
            pending_notice(broker, pending, seconds, False)

        result = execute(broker, manifest, options, wait=seconds, on_pending=notice)
    exec_ended({"session": result.session, "revoked": result.revoke.complete, "notes": list(result.notes)}, {})
    return result.status
