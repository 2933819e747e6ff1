"""``broker audit verify | list | lookup | active | public-key | rotate-key | migrate-keys``: the log, read and keyed.

Registered by ``broker.cli.audit``; the fleet's side of each (a log kept in PostgreSQL) is ``broker.cli.audit.fleet``.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from broker.cli.context import load_config, open_broker
from broker.vocab.errors import BadInput

if TYPE_CHECKING:
    from datetime import datetime

    from broker.audit.pglog import TableSource
    from broker.audit.verify import VerifyResult

LIST_COLUMNS = ("seq", "time", "event", "session", "task", "credential", "provider", "requester")
#: What an auditor reads of a session's requests (``--event egress.request``): who did what where, and the outcome.
EVENT_COLUMNS = {
    "egress.request": ("seq", "time", "session", "credential", "method", "host", "path", "decision", "rule", "status")
}


def _log_path(ctx: typer.Context, log: Path | None) -> Path:
    if log is not None:
        return log
    return Path(load_config(ctx).state_dir) / "issuance.jsonl"


def _parse_time(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    from broker.vocab.time import parse_iso

    try:
        return parse_iso(value)
    except ValueError:
        raise BadInput(f"{option}: {value[:40]!r} is not an RFC 3339 time such as 2026-11-29T10:00:00Z") from None


def verify(
    ctx: typer.Context,
    log: Annotated[Path | None, typer.Option("--log", help="Log file [default: the config's state_dir log].")] = None,
    public_key: Annotated[
        Path | None, typer.Option("--public-key", help="Public key file from 'broker audit public-key'.")
    ] = None,
    expect_head: Annotated[
        str | None, typer.Option("--expect-head", help="SEQ:HASH of a record noted earlier; the log must hold it.")
    ] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Fail when records follow the newest checkpoint.")] = False,
    witness: Annotated[
        str | None,
        typer.Option("--witness", help="s3://BUCKET/PREFIX holding witnessed checkpoints; the log must match them."),
    ] = None,
    witness_endpoint_url: Annotated[
        str | None, typer.Option("--witness-endpoint-url", help="S3 endpoint [default: the config's].")
    ] = None,
    witness_region: Annotated[str | None, typer.Option("--witness-region", help="Bucket region.")] = None,
    witness_profile: Annotated[str | None, typer.Option("--witness-profile", help="AWS profile to read it.")] = None,
    store: Annotated[
        str | None, typer.Option("--store", help="postgresql://USER@HOST/DB: the fleet's log, checked in place.")
    ] = None,
    repair: Annotated[bool, typer.Option("--repair", help="Cut a torn last record left by a crash.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Check the hash chain, the signed checkpoints and the witness; exit 6 naming the first bad seq.

    Example: broker audit verify --log issuance.jsonl --public-key broker.pub --strict
    """
    from broker.audit.chain import repair_torn_tail
    from broker.audit.verify import failure_json, parse_head, verify_log
    from broker.cli.audit.fleet import fleet_target, optional_config, pinned_keys, store_head, verify_fleet
    from broker.vocab.errors import LogVerificationError

    expected = [parse_head(expect_head)] if expect_head is not None else []
    if log is not None and store is not None:
        raise BadInput("give --log FILE or --store URL, not both")
    offline = log is not None and public_key is not None  # an auditor's own machine: no config needed
    config = optional_config(ctx) if store is not None else None if offline else load_config(ctx)
    fleet = fleet_target(ctx, log, store) if log is None else None
    if fleet is not None and repair:
        raise BadInput("--repair: the fleet's log has no torn record to cut (each record is one row)")
    path = log if log is not None else Path(config.state_dir if config else ".") / "issuance.jsonl"
    keys = pinned_keys(config, public_key)[0] if fleet is None else {}
    if config is not None and log is None and store is None:
        expected += store_head(config)
    witnessed = None
    if witness is not None:
        from broker.audit.witness import WitnessConfig, parse_witness_url, witnessed_checkpoints

        bucket, prefix = parse_witness_url(witness, "--witness")
        configured = config.witness if config is not None else None
        source = WitnessConfig(
            bucket,
            prefix,
            witness_endpoint_url or (configured.endpoint_url if configured else None),
            witness_region or (configured.region if configured else None),
            witness_profile or (configured.profile if configured else None),
        )
    try:
        if witness is not None:
            witnessed = witnessed_checkpoints(source)
        if fleet is not None:
            result = verify_fleet(fleet, public_key, expected=tuple(expected), witnessed=witnessed, strict=strict)
        else:
            result = verify_log(
                path, keys, expected_heads=tuple(expected), witnessed=witnessed, allow_torn_tail=repair, strict=strict
            )
    except LogVerificationError as error:
        if as_json:
            typer.echo(json.dumps(failure_json(error)))
        raise
    if result.torn_tail and repair:
        removed = repair_torn_tail(path)
        if config is not None and log is None:
            with open_broker(config) as broker:
                broker.log.append(
                    "log.repaired", session=None, task=None, requester=str(broker.requester), bytes_removed=removed
                )
        typer.echo(f"repaired: cut a torn record of {removed} bytes after seq {result.records}", err=True)
    if as_json:
        typer.echo(json.dumps(result.to_json()))
        return
    typer.echo(result.summary(witness=witness is not None))


def _checked(ctx: typer.Context, path: Path | TableSource, no_verify: bool) -> VerifyResult | None:
    """Check the log's chain before reading it (exit 6 when broken); a prefix checked before is only rehashed."""
    if no_verify:
        return None
    if not isinstance(path, Path):
        from broker.cli.audit.fleet import check_fleet_chain

        return check_fleet_chain(path)
    import contextlib

    from broker.audit.chain import CheckedPrefix, check_chain
    from broker.core.store import has_store, open_config_store
    from broker.vocab.errors import BrokerError

    store = None
    with contextlib.suppress(BrokerError):
        config = load_config(ctx)
        if has_store(config):
            store = open_config_store(config)
    try:
        name = str(path.resolve())
        cached = store.checked_prefix(name) if store is not None else None
        known = None
        if cached is not None:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                known = CheckedPrefix(
                    int(cached["offset"]),
                    int(cached["seq"]),
                    str(cached["hash"]),
                    str(cached["digest"]),
                    frozenset(cached["fingerprint_key_ids"]),
                )
        result, prefix = check_chain(path, known)
        if store is not None and prefix is not None:
            with contextlib.suppress(BrokerError):  # a read-only store: check in full next time
                store.set_checked_prefix(
                    name, {**prefix.__dict__, "fingerprint_key_ids": sorted(prefix.fingerprint_key_ids)}
                )
    finally:
        if store is not None:
            store.close()
    if result.unsigned_tail:
        typer.echo(f"note: {result.unsigned_tail} record(s) after the newest checkpoint are not signed yet", err=True)
    return result


def list_records(
    ctx: typer.Context,
    session: Annotated[str | None, typer.Option("--session", help="Only this session.")] = None,
    task: Annotated[str | None, typer.Option("--task", help="Only this task.")] = None,
    provider: Annotated[str | None, typer.Option("--provider", help="Only this provider instance.")] = None,
    event: Annotated[str | None, typer.Option("--event", help="Only this event, e.g. credential.issued.")] = None,
    since: Annotated[str | None, typer.Option("--since", help="From this time (RFC 3339).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Up to this time (RFC 3339).")] = None,
    log: Annotated[Path | None, typer.Option("--log", help="Log file [default: the config's].")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines.")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="CSV with a header row.")] = False,
) -> None:
    """Read the log as an auditor, filtered.

    With --event egress.request the table shows each request a session made through its proxy (credential,
    method, host, path, decision, rule, status); --json gives every field, the hashes included.

    Example: broker audit list --task fix-build-123 --since 2026-11-29T00:00:00Z
    """
    from broker.audit.query import RecordFilter
    from broker.audit.query import list_records as select
    from broker.cli.audit.fleet import log_source
    from broker.vocab.session_ids import check_session_id

    if session is not None:
        check_session_id(session)
    record_filter = RecordFilter(
        session=session,
        task=task,
        provider=provider,
        event=event,
        since=_parse_time(since, "--since"),
        until=_parse_time(until, "--until"),
    )
    with log_source(ctx, log) as source:
        records = select(source, record_filter)
        if as_json:
            for record in records:
                typer.echo(json.dumps(record, sort_keys=True))
            return
        columns = EVENT_COLUMNS.get(event or "", LIST_COLUMNS)
        rows = [[_cell(record.get(column)) for column in columns] for record in records]
    if as_csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
        return
    _table(columns, rows)


def _cell(value: object) -> str:
    return "" if value is None else str(value)


def _table(columns: tuple[str, ...], rows: list[list[str]]) -> None:
    from broker.cli.output import print_table

    print_table(columns, rows)


def lookup(
    ctx: typer.Context,
    secret_file: Annotated[Path | None, typer.Option("--secret-file", help="File holding the leaked secret.")] = None,
    secret_stdin: Annotated[bool, typer.Option("--secret-stdin", help="Read the leaked secret from stdin.")] = False,
    log: Annotated[Path | None, typer.Option("--log", help="Log file [default: the config's].")] = None,
    no_verify: Annotated[bool, typer.Option("--no-verify", help="Read the log without checking its chain.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Find the session, task and credential that minted a leaked secret (never echoes it).

    Example: broker audit lookup --secret-file leaked-token.txt
    """
    from broker.audit.keys import load_fingerprint_keys
    from broker.audit.query import check_fingerprint_keys, read_leaked_secret
    from broker.audit.query import lookup as find
    from broker.cli.audit.fleet import fleet_keys_partly_held, log_source

    if (secret_file is None) == (not secret_stdin):
        raise BadInput("lookup needs exactly one of --secret-file FILE or --secret-stdin")
    config = load_config(ctx)
    keys = load_fingerprint_keys(config.fingerprint_key)  # never the signing key
    with log_source(ctx, log) as source:
        checked = _checked(ctx, source, no_verify)
        seen = checked.fingerprint_key_ids if checked else frozenset()
        if not fleet_keys_partly_held(source, keys, seen):
            check_fingerprint_keys(source, keys, config.fingerprint_key, seen)
        candidates = read_leaked_secret(secret_file, sys.stdin.buffer.read(65 * 1024) if secret_stdin else None)
        fingerprints = [secret.fingerprint(key) for secret in candidates for key in keys.hmac_keys()]
        del candidates
        matches = find(source, fingerprints)
    if as_json:
        typer.echo(json.dumps(matches, indent=2))
    elif not matches:
        typer.echo("no credential in the log has that fingerprint")
    for match in [] if as_json else matches:
        revoked = match["revoked"]
        state = f"{revoked['outcome']} at {revoked['time']}" if revoked else "not revoked"
        typer.echo(
            f"session {match['session']}  task {match['task']}  credential {match['credential']}"
            f" ({match['type']} via {match['provider']})"
        )
        typer.echo(f"  issued {match['issued_at']} to {match['requester']}, expires {match['expires_at']}, {state}")
        typer.echo(f"  scope {json.dumps(match['scope'], sort_keys=True)}")
    if not matches:
        raise typer.Exit(1 if not as_json else 0)


def active(
    ctx: typer.Context,
    log: Annotated[Path | None, typer.Option("--log", help="Log file [default: the config's].")] = None,
    no_verify: Annotated[bool, typer.Option("--no-verify", help="Read the log without checking its chain.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Credentials live now (issued, not revoked, not expired): who can do what right now.

    Example: broker audit active --json
    """
    from broker.audit.query import active_credentials
    from broker.vocab.time import utcnow

    items = _fleet_active(ctx) if log is None else None
    if items is None:
        path = _log_path(ctx, log)
        _checked(ctx, path, no_verify)
        items = active_credentials(path, utcnow())
    if as_json:
        typer.echo(json.dumps(items, indent=2))
        return
    columns = ("session", "task", "credential", "type", "expires_at", "scope")
    _table(
        columns, [[_cell(i[c]) if c != "scope" else json.dumps(i[c], sort_keys=True) for c in columns] for i in items]
    )


def _fleet_active(ctx: typer.Context) -> list[dict[str, Any]] | None:
    """With a shared store (fleet mode), what is live on every host, from the store; else None (read the log)."""
    config = load_config(ctx)
    if config.store is None:
        return None
    from broker.core.status import fleet_active
    from broker.core.store import open_config_store
    from broker.vocab.time import utcnow

    store = open_config_store(config)
    try:
        return fleet_active(store, config.providers, utcnow())
    finally:
        store.close()


def public_key(ctx: typer.Context) -> None:
    """Print the public keys auditors verify checkpoints with: current, then retired (a fleet: every host's).

    Example: broker audit public-key > broker.pub
    """
    from broker.audit.keys import load_or_create_keys

    config = load_config(ctx)
    if config.store is not None:  # a fleet: every host's key, each with its host
        from broker.cli.audit.fleet import fleet_public_keys

        for line in fleet_public_keys(config):
            typer.echo(line)
        return
    for line in load_or_create_keys(config.audit_key, config.fingerprint_key).public_key_lines():
        typer.echo(line)


def rotate_key(
    ctx: typer.Context,
    which: Annotated[
        str, typer.Option("--key", help="signing (audit_key, signs checkpoints) or fingerprint (fingerprint_key).")
    ] = "signing",
) -> None:
    """Replace one audit key; older checkpoints stay verifiable and older fingerprints searchable.

    Example: broker audit rotate-key --key signing && broker audit public-key > broker.pub
    """
    from broker.audit.keys import rotate_fingerprint_key, rotate_signing_key

    config = load_config(ctx)
    if which == "signing":
        signing = rotate_signing_key(config.audit_key)
        typer.echo(f"new signing key {signing.key_id}; {len(signing.retired)} retired key(s) kept for verification")
    elif which == "fingerprint":
        fingerprint = rotate_fingerprint_key(config.fingerprint_key)
        typer.echo(
            f"new fingerprint key {fingerprint.key_id}; {len(fingerprint.retired)} retired key(s) kept for lookup"
        )
    else:
        raise BadInput(f"--key: {which[:20]!r} is not signing or fingerprint")


def migrate_keys(ctx: typer.Context) -> None:
    """Split an older one-file audit key into audit_key (signing) and fingerprint_key (HMAC).

    Example: broker audit migrate-keys
    """
    from broker.audit.keys import migrate_key_file

    config = load_config(ctx)
    done = migrate_key_file(config.audit_key, config.fingerprint_key)
    if done is None:
        typer.echo(f"nothing to do: {config.audit_key} holds only the signing key")
        return
    typer.echo(
        f"split {config.audit_key}: signing key {done.signing_key_id} stays there; fingerprint key"
        f" {done.fingerprint_key_id} moved to {config.fingerprint_key} ({done.retired} retired key(s) each)"
    )
