"""``broker policy check | lint``: the decision without minting, and policy file validation."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from broker.cli.context import load_config, print_json
from broker.vocab.errors import PolicyFileError

policy_app = typer.Typer(help="Check manifests against the policy; lint policy files.", no_args_is_help=True)


@policy_app.command("check")
def policy_check(
    ctx: typer.Context,
    task: Annotated[str, typer.Option("--task", help="Task manifest to decide on.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the decision as JSON.")] = False,
) -> None:
    """The decision for a manifest, without minting anything (exit 0 allowed, 3 denied).

    Example: broker policy check --task task.yaml
    """
    from broker.cli.render import decision_lines
    from broker.core.broker import Requester
    from broker.core.inputs.manifest import load_manifest
    from broker.core.inputs.policy import decide, load_policy
    from broker.vocab.errors import PolicyDenied

    config = load_config(ctx)
    manifest = load_manifest(task, config)
    decision = decide(load_policy(config.policy_dir, config), manifest, Requester.current(), config)
    if as_json:
        print_json(decision.to_json())
    else:
        for line in decision_lines(decision.to_json()):
            typer.echo(line)
    if not decision.allowed:
        raise PolicyDenied(decision.denial_message())


@policy_app.command("lint")
def policy_lint(
    ctx: typer.Context,
    directory: Annotated[
        Path | None, typer.Argument(help="Policy directory [default: the config's policy_dir].")
    ] = None,
) -> None:
    """Validate policy files (syntax, fields, provider instances the config defines).

    Example: broker policy lint /etc/broker/policies
    """
    from broker.core.inputs.policy import load_policy

    config = load_config(ctx)
    policy = load_policy(directory or config.policy_dir, config)
    idle = [rule.id for rule in policy.rules if rule.allows_no_sandbox]
    if idle:
        one = len(idle) == 1
        raise PolicyFileError(
            f"rule{'' if one else 's'} {', '.join(idle)} list{'s' if one else ''} no sandbox_uids/sandbox_gids"
            f" and allow{'s' if one else ''} no session: add the uids and gids the sandbox may run as"
        )
    typer.echo(f"ok: {len(policy.rules)} rules in {len(policy.files)} files")
