"""``broker init``: a commented config, an example policy, the audit keys and the broker's directories."""

from __future__ import annotations

from pathlib import Path

from broker.cli.context import Invocation, echo
from broker.core.inputs.config import DEFAULT_CONFIG_PATH
from broker.core.setup.install import InitOptions, initialise


def init(run: Invocation, directory: Path, state_dir: Path, runtime_dir: Path, force: bool) -> None:
    result = initialise(InitOptions(directory=directory, state_dir=state_dir, runtime_dir=runtime_dir, force=force))
    for step in result.steps:
        echo(f"{step.action} {step.path} ({step.what})")
    broker = "broker" if result.config == DEFAULT_CONFIG_PATH else f"broker --config {result.config}"
    echo("next steps:")
    echo(f"  1. add a provider: uncomment and fill a [providers.*] table in {result.config}")
    echo(
        f"  2. add a policy: copy {result.policy_example} to default.yaml (it grants provider 'vault')"
        f" or write your own, then: {broker} policy lint"
    )
    echo(f"  3. check everything: {broker} doctor")
