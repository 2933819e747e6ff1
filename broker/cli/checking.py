"""``broker policy check | lint``: the decision without minting, and policy file validation."""

from __future__ import annotations

from pathlib import Path

from broker.cli.context import Invocation, echo
from broker.cli.render import decision as show_decision
from broker.core.broker import Requester
from broker.core.inputs.manifest import load_manifest
from broker.core.inputs.policy import decide, load_policy
from broker.vocab.errors import PolicyDenied, PolicyFileError


def check(run: Invocation, task: str, as_json: bool) -> None:
    config = run.load_config()
    manifest = load_manifest(task, config)
    decision = decide(load_policy(config.policy_dir, config), manifest, Requester.current(), config)
    show_decision(decision.to_json(), {"as_json": as_json})
    if not decision.allowed:
        raise PolicyDenied(decision.denial_message())


def lint(run: Invocation, directory: Path | None) -> None:
    config = run.load_config()
    policy = load_policy(directory or config.policy_dir, config)
    idle = [rule.id for rule in policy.rules if rule.allows_no_sandbox]
    if idle:
        one = len(idle) == 1
        raise PolicyFileError(
            f"rule{'' if one else 's'} {', '.join(idle)} list{'s' if one else ''} no sandbox_uids/sandbox_gids"
            f" and allow{'s' if one else ''} no session: add the uids and gids the sandbox may run as"
        )
    echo(f"ok: {len(policy.rules)} rules in {len(policy.files)} files")
