"""``broker issue | revoke | status | renew | exec | sweep``: the session commands (parse, call the core, print)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from broker.cli.context import load_config, open_broker, print_error, print_json
from broker.vocab.errors import RevokeIncomplete


class OutputFormat(StrEnum):
    json = "json"
    env = "env"
    docker = "docker"
    podman = "podman"
    bwrap = "bwrap"


def issue(
    ctx: typer.Context,
    task: Annotated[str, typer.Option("--task", help="Task manifest (YAML or JSON; - for stdin).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the session document as JSON.")] = False,
    fmt: Annotated[OutputFormat | None, typer.Option("--format", help="What to print for the launcher.")] = None,
    session_file: Annotated[
        Path | None, typer.Option("--session-file", help="Also write the session id to this file.")
    ] = None,
) -> None:
    """Decide, mint, inject and log the credentials a task manifest asks for.

    Example: broker issue --task task.yaml --format docker --session-file /tmp/session
    """
    from broker.core.inputs.manifest import load_manifest
    from broker.core.warming import warm_up

    config = load_config(ctx)
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
                emit(render(document, (fmt or OutputFormat.json).value))
            else:
                emit(issue_text(document))
    finally:
        if target is not None:
            target.close()


def revoke(
    ctx: typer.Context,
    session: Annotated[str | None, typer.Option("--session", help="Session id to revoke.")] = None,
    task: Annotated[str | None, typer.Option("--task", help="Revoke every live session of this task.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
) -> None:
    """Revoke every credential of a session at its provider and wipe its directory (idempotent).

    Example: broker revoke --session s-4k2j9x7q3m1p
    """
    from broker.vocab.errors import UsageError
    from broker.vocab.session_ids import check_session_id

    if (session is None) == (task is None):
        raise UsageError("revoke needs exactly one of --session ID or --task NAME")
    if session is not None:
        check_session_id(session)
    config = load_config(ctx)
    from broker.core.warming import warm_revocation

    store = warm_revocation(config, session, task)  # the handshakes overlap the core's imports below
    from broker.cli.render import revoke_incomplete, revoke_lines
    from broker.core.revoking import revoke_session, revoke_task

    with open_broker(config, store) as broker:
        if session is not None:
            reports = [revoke_session(broker, session)]
        else:
            assert task is not None
            reports = revoke_task(broker, task)
    if as_json:
        print_json(reports[0].to_json() if session is not None else [r.to_json() for r in reports])
    else:
        for line in revoke_lines([r.to_json() for r in reports]):
            typer.echo(line)
    incomplete = [r.session for r in reports if not r.complete]
    if incomplete:
        raise RevokeIncomplete(revoke_incomplete(incomplete))


def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    show_all: Annotated[bool, typer.Option("--all", help="Include ended sessions.")] = False,
) -> None:
    """List live sessions (with --all, ended ones too).

    Example: broker status --json
    """
    from broker.core.status import session_status

    config = load_config(ctx)
    with open_broker(config) as broker:
        providers = broker.config.providers if as_json else None  # --json adds each AWS role's deny budget
        found = session_status(broker.store, include_ended=show_all, providers=providers, now=broker.clock())
    sessions = [session.to_json() for session in found]
    if as_json:
        print_json(sessions)
        return
    if not sessions:
        typer.echo("no live sessions" if not show_all else "no sessions")
        return
    from broker.cli.output import print_table
    from broker.cli.render import STATUS_COLUMNS, status_rows
    from broker.vocab.time import utcnow

    print_table(STATUS_COLUMNS, status_rows(sessions, utcnow()))


def renew(
    ctx: typer.Context,
    session: Annotated[str, typer.Option("--session", help="Session whose short-lived credentials to re-mint.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the renewals as JSON.")] = False,
) -> None:
    """Re-mint credentials that expire before their session (GitHub's hour), swap the files, revoke the old ones.

    Example: broker renew --session s-4k2j9x7q3m1p
    """
    from broker.cli.render import RENEW_PENDING, renew_lines
    from broker.core.renewing import renew_session
    from broker.vocab.session_ids import check_session_id

    check_session_id(session)
    config = load_config(ctx)
    with open_broker(config) as broker:
        renewals = renew_session(broker, session)
    if as_json:
        print_json([r.to_json() for r in renewals])
        return
    for line in renew_lines([r.to_json() for r in renewals]):
        typer.echo(line)
    if any(r.old_outcome == "pending" for r in renewals):
        raise RevokeIncomplete(RENEW_PENDING)


class SandboxKind(StrEnum):
    none = "none"
    bwrap = "bwrap"


class NetworkKind(StrEnum):
    none = "none"
    host = "host"
    allowlist = "allowlist"


def exec(
    ctx: typer.Context,
    command: Annotated[list[str], typer.Argument(help="The command to run (after --).", metavar="-- CMD ARGS...")],
    task: Annotated[str, typer.Option("--task", help="Task manifest (YAML or JSON).")],
    sandbox: Annotated[SandboxKind, typer.Option("--sandbox", help="Run CMD in bubblewrap, or on the host.")] = (
        SandboxKind.bwrap
    ),
    network: Annotated[
        NetworkKind | None,
        typer.Option(
            "--network",
            help="Network inside the sandbox [default: allowlist when the manifest has a network section, else none].",
            show_default=False,
        ),
    ] = None,
    workspace: Annotated[
        Path | None, typer.Option("--workspace", help="Directory bound read-write at /workspace [default: a tmpfs].")
    ] = None,
    read_only: Annotated[
        list[str] | None, typer.Option("--ro-bind", help="Extra host path bound read-only at the same path.")
    ] = None,
) -> None:
    """Issue, run CMD with only its scoped credentials, revoke when it ends; exit with CMD's status.

    CMD gets a clean environment: PATH, HOME, LANG, TERM, the session's hints and the manifest's sandbox.env.
    Example: broker exec --task task.yaml --sandbox bwrap --workspace ./repo -- make test
    """
    from broker.core.executing import ExecOptions, check_sandbox_available, execute
    from broker.core.inputs.manifest import load_manifest

    options = ExecOptions(
        command=tuple(command),
        sandbox=sandbox.value,
        network=network.value if network is not None else None,
        workspace=workspace,
        read_only=tuple(read_only or ()),
    )
    config = load_config(ctx)
    manifest = load_manifest(task, config)
    check_sandbox_available(options, manifest)
    with open_broker(config) as broker:
        result = execute(broker, manifest, options)
    if not result.revoke.complete:
        print_error(f"session {result.session}: revocation incomplete; pending credentials stay for broker sweep")
    raise typer.Exit(result.status)


def sweep(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was done as JSON.")] = False,
) -> None:
    """Revoke expired sessions, retry pending revocations, finish what a crash left, remove orphans.

    Only provable broker session directories are removed; anything else in runtime_dir is listed as foreign
    and left alone; a malformed row of the store is listed as malformed and skipped.
    Run it every minute (scripts/systemd/broker-sweep.timer). Exit 5 while something stays pending.
    Example: broker sweep --json
    """
    from broker.cli.output import progress_bar
    from broker.core.sweeping import sweep as run_sweep
    from broker.vocab.fields import shown

    config = load_config(ctx)
    with open_broker(config) as broker, progress_bar("sweeping sessions") as progress:
        report = run_sweep(broker, progress)
    if as_json:
        print_json(report.to_json())
    else:
        typer.echo(
            f"expired {len(report.expired)}, recovered {len(report.recovered)}, retried {len(report.retried)},"
            f" orphans removed {len(report.orphans_removed)}, busy {len(report.busy)}, pending {len(report.pending)},"
            f" foreign {len(report.foreign)}, malformed {len(report.malformed)}"
        )
        for item in report.pending:
            typer.echo(f"  pending: {item['session']} {item['credential']}")
        for name in report.foreign:
            typer.echo(f"  foreign, left alone: {shown(name, 80)}")
        for row in report.malformed:
            typer.echo(
                f"  malformed {row['table']} row, skipped: {shown(row['row'], 80)}: {'; '.join(row['problems'])}"
            )
    if not report.complete:
        raise RevokeIncomplete(f"{len(report.pending)} credential(s) still pending; the next sweep retries them")


def register(app: typer.Typer) -> None:
    """Add the session commands to the main application, in help order."""
    app.command()(issue)
    app.command()(revoke)
    app.command()(status)
    app.command()(renew)
    app.command(context_settings={"allow_interspersed_args": False})(exec)
    app.command()(sweep)
