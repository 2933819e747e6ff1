"""``broker init`` and ``broker doctor``: the operator's set-up and health-check commands."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from broker.cli.context import options, print_json

if TYPE_CHECKING:
    from broker.core.setup.doctor import Check

OK_MARK = "✓"
BAD_MARK = "✗"


def register_ops(app: typer.Typer) -> None:
    """Add the operator commands to the main application."""
    app.command("init")(init)
    app.command("doctor")(doctor)
    app.command("serve")(serve)


def init(
    directory: Annotated[
        Path, typer.Option("--dir", help="Config directory: broker.toml, policies/ and audit.key go here.")
    ] = Path("/etc/broker"),
    state_dir: Annotated[
        Path, typer.Option("--state-dir", help="Session store and issuance log (persistent, no secrets).")
    ] = Path("/var/lib/broker"),
    runtime_dir: Annotated[
        Path, typer.Option("--runtime-dir", help="Per-session tmpfs directories (the credentials).")
    ] = Path("/run/broker"),
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite broker.toml and the example policy (the audit key is kept).")
    ] = False,
) -> None:
    """Write a commented config, an example policy, the audit keys and the broker's directories.

    Refuses to overwrite an existing file without --force (exit 2); never regenerates an existing audit key.
    Example: broker init --dir /etc/broker --state-dir /var/lib/broker --runtime-dir /run/broker
    """
    from broker.core.inputs.config import DEFAULT_CONFIG_PATH
    from broker.core.setup.install import InitOptions, initialise

    result = initialise(InitOptions(directory=directory, state_dir=state_dir, runtime_dir=runtime_dir, force=force))
    for step in result.steps:
        typer.echo(f"{step.action} {step.path} ({step.what})")
    broker = "broker" if result.config == DEFAULT_CONFIG_PATH else f"broker --config {result.config}"
    typer.echo("next steps:")
    typer.echo(f"  1. add a provider: uncomment and fill a [providers.*] table in {result.config}")
    typer.echo(
        f"  2. add a policy: copy {result.policy_example} to default.yaml (it grants provider 'vault')"
        f" or write your own, then: {broker} policy lint"
    )
    typer.echo(f"  3. check everything: {broker} doctor")


def doctor(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
) -> None:
    """Check the installation: config, policy, runtime and state directories, audit key, every provider.

    One line per check, ✓ or ✗ with what to fix; nothing is minted. Exit 0 when every check passes, 2 otherwise.
    Example: broker doctor --json
    """
    from broker.core.inputs.config import config_path
    from broker.core.setup.doctor import run_doctor
    from broker.daemon.health import check_daemon
    from broker.vocab.errors import BadInput

    report = run_doctor(config_path(options(ctx).config), check_daemon)
    if as_json:
        print_json(report.to_json())
    else:
        colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        for check in report.checks:
            typer.echo(_line(check, colour=colour))
    if not report.ok:
        raise BadInput(f"doctor: {len(report.failed)} of {len(report.checks)} checks failed")


def serve(
    ctx: typer.Context,
    socket: Annotated[
        Path | None, typer.Option("--socket", help="Unix socket [default: [daemon] socket or runtime_dir/broker.sock].")
    ] = None,
) -> None:
    """Run the broker as a daemon: HTTP/1.1 + JSON on a Unix socket, the caller named by the kernel.

    Sweeps every [daemon] sweep_interval; on SIGTERM stops accepting, finishes what is in flight and exits.
    Under systemd, scripts/systemd/broker.socket hands it the socket. Example: broker serve --socket /run/broker.sock
    """
    from broker.cli.context import load_config
    from broker.daemon.server import serve as run_daemon

    run_daemon(load_config(ctx), socket)


def _line(check: Check, *, colour: bool) -> str:
    mark = OK_MARK if check.ok else BAD_MARK
    if colour:
        mark = typer.style(mark, fg=typer.colors.GREEN if check.ok else typer.colors.RED, bold=True)
    fix = f" — fix: {check.fix}" if check.fix else ""
    return f"{mark} {check.name}: {check.detail}{fix}"
