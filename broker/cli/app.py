"""The ``broker`` command line: parse, call the core, print. Nothing else lives here.

Errors of the ``BrokerError`` family are caught once, in ``main``, and shown
as one line ``broker: error: ...`` with the exit code of SPEC.md; anything
else is a bug (exit 1, traceback only with ``--debug``).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from broker.core.config import Config

from broker import __version__
from broker.cli.audit import audit_app
from broker.cli.ops import register_ops
from broker.host.process_hardening import MemoryLock, harden_process, lock_memory
from broker.vocab.errors import REPORT_URL, BrokerError, Interrupted, PolicyFileError, RevokeIncomplete

app = typer.Typer(
    name="broker",
    help="Scoped-credential broker: short-lived, narrow credentials for sandboxed agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
policy_app = typer.Typer(help="Check manifests against the policy; lint policy files.", no_args_is_help=True)
app.add_typer(policy_app, name="policy")
app.add_typer(audit_app, name="audit")
register_ops(app)


@dataclass(frozen=True)
class Options:
    config: str | None
    debug: bool


class LogFormat(StrEnum):
    text = "text"
    json = "json"


class OutputFormat(StrEnum):
    json = "json"
    env = "env"
    docker = "docker"
    podman = "podman"
    bwrap = "bwrap"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"broker {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_options(
    ctx: typer.Context,
    config: Annotated[
        str | None,
        typer.Option("--config", envvar="BROKER_CONFIG", help="Config file [default: /etc/broker/broker.toml]."),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for internal errors.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log the policy decision and every provider call to stderr.")
    ] = False,
    log_format: Annotated[LogFormat, typer.Option("--log-format", help="Format of stderr logs.")] = LogFormat.text,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    memory = ctx.obj if isinstance(ctx.obj, MemoryLock) else None  # from run(): this process's memory lock
    ctx.obj = Options(config=config, debug=debug)
    import logging

    from broker.vocab.logs import configure, event

    configure(verbose, log_format.value)
    if memory is not None:
        log = logging.getLogger("broker.process")
        if memory.locked:
            event(log, "memory locked")
        else:
            event(log, "memory not locked: secrets may reach swap", reason=memory.detail)


def _options(ctx: typer.Context) -> Options:
    options = ctx.find_object(Options)
    return options if options is not None else Options(config=None, debug=False)


def _config(ctx: typer.Context) -> Config:
    from broker.core.config import config_path, load_config

    return load_config(config_path(_options(ctx).config))


@contextlib.contextmanager
def _broker(config: Config) -> Iterator[Any]:
    from broker.core.broker import Broker

    broker = Broker.open(config)
    try:
        yield broker
    except BaseException:
        # The command's own failure is what to report; a checkpoint that fails now is signed by the next command.
        with contextlib.suppress(BrokerError):
            broker.close()
        raise
    broker.close()


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2))


# -- issue / revoke / status -------------------------------------------------------------


@app.command()
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
    from broker.cli.launch_formats import SessionFile, emit, render
    from broker.core.issuing import issue as issue_session
    from broker.core.manifest import load_manifest

    config = _config(ctx)
    manifest = load_manifest(task, config)
    target = SessionFile.open(session_file) if session_file is not None else None  # before anything is minted

    def deliver(document: dict[str, Any]) -> None:
        """Runs while the session can still be rolled back: any failure here revokes it (exit 4)."""
        if target is not None:
            target.write(document["session"])
        if as_json or fmt is not None:
            emit(render(document, (fmt or OutputFormat.json).value))
        else:
            emit(_issue_text(document))

    try:
        with _broker(config) as broker:
            issue_session(broker, manifest, deliver)
    finally:
        if target is not None:
            target.close()


def _issue_text(document: dict[str, Any]) -> str:
    lines = [
        f"session {document['session']}  task {document['task']}  expires {document['expires_at']}",
        f"dir {document['dir']}  (mount it read-only at {document['mount_path']})",
    ]
    for credential in document["credentials"]:
        lines.append(
            f"  {credential['name']}: {credential['type']} via {credential['provider']},"
            f" expires {credential['expires_at']}, files {', '.join(credential['files'])}"
        )
    lines += [f"  {key}={value}" for key, value in document["env"].items()]
    return "\n".join(lines)


@app.command()
def revoke(
    ctx: typer.Context,
    session: Annotated[str | None, typer.Option("--session", help="Session id to revoke.")] = None,
    task: Annotated[str | None, typer.Option("--task", help="Revoke every live session of this task.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
) -> None:
    """Revoke every credential of a session at its provider and wipe its directory (idempotent).

    Example: broker revoke --session s-4k2j9x7q3m1p
    """
    from broker.core.revoking import revoke_session, revoke_task
    from broker.vocab.errors import UsageError
    from broker.vocab.session_ids import check_session_id

    if (session is None) == (task is None):
        raise UsageError("revoke needs exactly one of --session ID or --task NAME")
    if session is not None:
        check_session_id(session)
    config = _config(ctx)
    with _broker(config) as broker:
        if session is not None:
            reports = [revoke_session(broker, session)]
        else:
            assert task is not None
            reports = revoke_task(broker, task)
    if as_json:
        _print_json(reports[0].to_json() if session is not None else [r.to_json() for r in reports])
    else:
        for report in reports:
            typer.echo(f"session {report.session}: directory {'removed' if report.dir_removed else 'NOT removed'}")
            for credential in report.credentials:
                typer.echo(f"  {credential.name} ({credential.provider}): {credential.outcome}")
    incomplete = [r.session for r in reports if not r.complete]
    if incomplete:
        raise RevokeIncomplete(
            f"revocation incomplete for {', '.join(incomplete)}: pending credentials stay for broker sweep"
        )


@app.command()
def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    show_all: Annotated[bool, typer.Option("--all", help="Include ended sessions.")] = False,
) -> None:
    """List live sessions (with --all, ended ones too).

    Example: broker status --json
    """
    from broker.core.status import session_status

    config = _config(ctx)
    with _broker(config) as broker:
        providers = broker.config.providers if as_json else None  # --json adds each AWS role's deny budget
        sessions = session_status(broker.store, include_ended=show_all, providers=providers, now=broker.clock())
    if as_json:
        _print_json(sessions)
        return
    if not sessions:
        typer.echo("no live sessions" if not show_all else "no sessions")
        return
    from broker.cli.output import print_table, time_left
    from broker.vocab.time import parse_iso, utcnow

    now = utcnow()
    rows = [
        [
            item["session"],
            item["task"],
            item["state"],
            time_left(parse_iso(item["expires_at"]), now),
            ", ".join(f"{c['name']} ({c['type']}, {c['state']})" for c in item["credentials"]),
        ]
        for item in sessions
    ]
    print_table(("SESSION", "TASK", "STATE", "EXPIRES", "CREDENTIALS"), rows)


@app.command()
def renew(
    ctx: typer.Context,
    session: Annotated[str, typer.Option("--session", help="Session whose short-lived credentials to re-mint.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the renewals as JSON.")] = False,
) -> None:
    """Re-mint credentials that expire before their session (GitHub's hour), swap the files, revoke the old ones.

    Example: broker renew --session s-4k2j9x7q3m1p
    """
    from broker.core.renewing import renew_session
    from broker.vocab.session_ids import check_session_id

    check_session_id(session)
    config = _config(ctx)
    with _broker(config) as broker:
        renewals = renew_session(broker, session)
    if as_json:
        _print_json([r.to_json() for r in renewals])
        return
    if not renewals:
        typer.echo("nothing to renew: every credential lasts as long as the session")
    for item in renewals:
        typer.echo(
            f"  {item.name}: expires {item.new_expires_at} (was {item.old_expires_at}; old one {item.old_outcome})"
        )
    if any(r.old_outcome == "pending" for r in renewals):
        raise RevokeIncomplete("a replaced credential could not be revoked now; it stays pending for broker sweep")


class SandboxKind(StrEnum):
    none = "none"
    bwrap = "bwrap"


class NetworkKind(StrEnum):
    none = "none"
    host = "host"


@app.command(context_settings={"allow_interspersed_args": False})
def exec(
    ctx: typer.Context,
    command: Annotated[list[str], typer.Argument(help="The command to run (after --).", metavar="-- CMD ARGS...")],
    task: Annotated[str, typer.Option("--task", help="Task manifest (YAML or JSON).")],
    sandbox: Annotated[SandboxKind, typer.Option("--sandbox", help="Run CMD in bubblewrap, or on the host.")] = (
        SandboxKind.bwrap
    ),
    network: Annotated[NetworkKind, typer.Option("--network", help="Network inside the sandbox.")] = (NetworkKind.none),
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
    from broker.core.manifest import load_manifest

    options = ExecOptions(
        command=tuple(command),
        sandbox=sandbox.value,
        network=network.value,
        workspace=workspace,
        read_only=tuple(read_only or ()),
    )
    config = _config(ctx)
    manifest = load_manifest(task, config)
    check_sandbox_available(options)
    with _broker(config) as broker:
        result = execute(broker, manifest, options)
    if not result.revoke.complete:
        _error(f"session {result.session}: revocation incomplete; pending credentials stay for broker sweep")
    raise typer.Exit(result.status)


@app.command()
def sweep(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was done as JSON.")] = False,
) -> None:
    """Revoke expired sessions, retry pending revocations, finish what a crash left, remove orphans.

    Only provable broker session directories are removed; anything else in runtime_dir is listed as foreign
    and left alone. Run it every minute (scripts/systemd/broker-sweep.timer). Exit 5 while something stays pending.
    Example: broker sweep --json
    """
    from broker.cli.output import progress_bar
    from broker.core.sweeping import sweep as run_sweep
    from broker.vocab.fields import shown

    config = _config(ctx)
    with _broker(config) as broker, progress_bar("sweeping sessions") as progress:
        report = run_sweep(broker, progress)
    if as_json:
        _print_json(report.to_json())
    else:
        typer.echo(
            f"expired {len(report.expired)}, recovered {len(report.recovered)}, retried {len(report.retried)},"
            f" orphans removed {len(report.orphans_removed)}, busy {len(report.busy)}, pending {len(report.pending)},"
            f" foreign {len(report.foreign)}"
        )
        for item in report.pending:
            typer.echo(f"  pending: {item['session']} {item['credential']}")
        for name in report.foreign:
            typer.echo(f"  foreign, left alone: {shown(name, 80)}")
    if not report.complete:
        raise RevokeIncomplete(f"{len(report.pending)} credential(s) still pending; the next sweep retries them")


# -- policy ------------------------------------------------------------------------------


@policy_app.command("check")
def policy_check(
    ctx: typer.Context,
    task: Annotated[str, typer.Option("--task", help="Task manifest to decide on.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the decision as JSON.")] = False,
) -> None:
    """The decision for a manifest, without minting anything (exit 0 allowed, 3 denied).

    Example: broker policy check --task task.yaml
    """
    from broker.core.broker import current_requester
    from broker.core.manifest import load_manifest
    from broker.core.policy import decide, load_policy
    from broker.vocab.durations import format_duration
    from broker.vocab.errors import PolicyDenied

    config = _config(ctx)
    manifest = load_manifest(task, config)
    decision = decide(load_policy(config.policy_dir, config), manifest, current_requester(), config)
    if as_json:
        _print_json(decision.to_json())
    else:
        verdict = "allowed" if decision.allowed else "denied"
        ttl = format_duration(decision.session_ttl)
        typer.echo(f"task {decision.task} for {decision.requester}: {verdict}, session ttl {ttl}")
        for credential in decision.credentials:
            if credential.allowed:
                assert credential.ttl is not None
                typer.echo(
                    f"  {credential.name}: allowed by rule {credential.rule}, ttl {format_duration(credential.ttl)}"
                )
            else:
                typer.echo(f"  {credential.name}: denied")
                for reason in credential.reasons:
                    typer.echo(f"    - {reason}")
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
    from broker.core.policy import load_policy

    config = _config(ctx)
    policy = load_policy(directory or config.policy_dir, config)
    idle = [rule.id for rule in policy.rules if rule.allows_no_sandbox]
    if idle:
        one = len(idle) == 1
        raise PolicyFileError(
            f"rule{'' if one else 's'} {', '.join(idle)} list{'s' if one else ''} no sandbox_uids/sandbox_gids"
            f" and allow{'s' if one else ''} no session: add the uids and gids the sandbox may run as"
        )
    typer.echo(f"ok: {len(policy.rules)} rules in {len(policy.files)} files")


# -- entry point -------------------------------------------------------------------------


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def _print_traceback() -> None:
    import traceback  # only with --debug

    traceback.print_exc()


def _error(message: str) -> None:
    sys.stderr.write(f"broker: error: {message}\n")


def main(argv: list[str] | None = None, *, memory: MemoryLock | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    harden_process()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_interrupted)
    try:
        result = app(args=args, prog_name="broker", standalone_mode=False, obj=memory)
    except typer.Abort:
        _error("aborted")
        return 130
    except typer.exceptions.TyperException as exc:  # usage errors from the parser
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        _error(" ".join(message.split()))
        return 2
    except KeyboardInterrupt:
        _error("interrupted; what was minted has been rolled back")
        return 130
    except BrokerError as exc:
        if debug and exc.exit_code == 1:
            _print_traceback()
        _error(exc.message)
        return exc.exit_code
    except Exception as exc:  # a bug
        if debug:
            _print_traceback()
        _error(f"internal error ({type(exc).__name__}); please report it at {REPORT_URL} (use --debug for details)")
        return 1
    return result if isinstance(result, int) else 0


def run() -> None:
    """The broker process: its memory is locked before anything is read (``main`` alone, in-process, is not)."""
    sys.exit(main(memory=lock_memory()))


if __name__ == "__main__":
    run()
