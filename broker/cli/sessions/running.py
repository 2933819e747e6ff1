"""``broker exec``: issue, run the command with only its credentials, revoke when it ends; its exit status."""

from __future__ import annotations

from pathlib import Path

from broker.cli.context import Invocation, print_error
from broker.cli.opening import open_broker
from broker.core.executing import ExecOptions, check_sandbox_available, execute
from broker.core.inputs.manifest import load_manifest


def run(
    invocation: Invocation,
    command: list[str],
    task: str,
    sandbox: str,
    network: str | None,
    workspace: Path | None,
    read_only: list[str],
) -> int:
    options = ExecOptions(
        command=tuple(command),
        sandbox=sandbox,
        network=network,
        workspace=workspace,
        read_only=tuple(read_only),
    )
    config = invocation.load_config()
    manifest = load_manifest(task, config)
    check_sandbox_available(options, manifest)
    with open_broker(config) as broker:
        result = execute(broker, manifest, options)
    if not result.revoke.complete:
        print_error(f"session {result.session}: revocation incomplete; pending credentials stay for broker sweep")
    return result.status
