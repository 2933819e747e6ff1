"""``broker audit list | lookup | active``: the log read as an auditor, its chain checked first.

The log is this host's file, ``--log FILE``, or a fleet's table in PostgreSQL
(``broker.cli.audit.fleet``).
"""

from __future__ import annotations

import contextlib
import csv
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from broker.audit.chain import CheckedPrefix, check_chain
from broker.audit.keys import load_fingerprint_keys
from broker.audit.pglog import TableSource
from broker.audit.query import RecordFilter, active_credentials, check_fingerprint_keys, read_leaked_secret
from broker.audit.query import list_records as select
from broker.audit.query import lookup as find
from broker.audit.verify import VerifyResult
from broker.cli.audit.fleet import check_fleet_chain, fleet_keys_partly_held, log_source
from broker.cli.context import Invocation, echo
from broker.cli.output import print_table
from broker.core.status import fleet_active
from broker.core.store import has_store, open_config_store
from broker.vocab.errors import BadInput, BrokerError
from broker.vocab.session_ids import check_session_id
from broker.vocab.time import parse_iso, utcnow

LIST_COLUMNS = ("seq", "time", "event", "session", "task", "credential", "provider", "requester")
#: What an auditor reads of a session's requests (``--event egress.request``): who did what where, and the outcome.
EVENT_COLUMNS = {
    "egress.request": ("seq", "time", "session", "credential", "method", "host", "path", "decision", "rule", "status")
}


def _log_path(run: Invocation, log: Path | None) -> Path:
    if log is not None:
        return log
    return Path(run.load_config().state_dir) / "issuance.jsonl"


def _parse_time(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None

    try:
        return parse_iso(value)
    except ValueError:
        raise BadInput(f"{option}: {value[:40]!r} is not an RFC 3339 time such as 2026-11-29T10:00:00Z") from None


def _checked(run: Invocation, path: Path | TableSource, no_verify: bool) -> VerifyResult | None:
    """Check the log's chain before reading it (exit 6 when broken); a prefix checked before is only rehashed."""
    if no_verify:
        return None
    if not isinstance(path, Path):
        return check_fleet_chain(path)

    store = None
    with contextlib.suppress(BrokerError):
        config = run.load_config()
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
        echo(f"note: {result.unsigned_tail} record(s) after the newest checkpoint are not signed yet", err=True)
    return result


def list_records(
    run: Invocation,
    session: str | None,
    task: str | None,
    provider: str | None,
    event: str | None,
    since: str | None,
    until: str | None,
    log: Path | None,
    as_json: bool,
    as_csv: bool,
) -> None:
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
    with log_source(run, log) as source:
        records = select(source, record_filter)
        if as_json:
            for record in records:
                echo(json.dumps(record, sort_keys=True))
            return
        columns = EVENT_COLUMNS.get(event or "", LIST_COLUMNS)
        rows = [[_cell(record.get(column)) for column in columns] for record in records]
    if as_csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
        return
    print_table(columns, rows)


def _cell(value: object) -> str:
    return "" if value is None else str(value)


def lookup(
    run: Invocation, secret_file: Path | None, secret_stdin: bool, log: Path | None, no_verify: bool, as_json: bool
) -> int | None:
    if (secret_file is None) == (not secret_stdin):
        raise BadInput("lookup needs exactly one of --secret-file FILE or --secret-stdin")
    config = run.load_config()
    keys = load_fingerprint_keys(config.fingerprint_key)  # never the signing key
    with log_source(run, log) as source:
        checked = _checked(run, source, no_verify)
        seen = checked.fingerprint_key_ids if checked else frozenset()
        if not fleet_keys_partly_held(source, keys, seen):
            check_fingerprint_keys(source, keys, config.fingerprint_key, seen)
        candidates = read_leaked_secret(secret_file, sys.stdin.buffer.read(65 * 1024) if secret_stdin else None)
        fingerprints = [secret.fingerprint(key) for secret in candidates for key in keys.hmac_keys()]
        del candidates
        matches = find(source, fingerprints)
    if as_json:
        echo(json.dumps(matches, indent=2))
    elif not matches:
        echo("no credential in the log has that fingerprint")
    for match in [] if as_json else matches:
        revoked = match["revoked"]
        state = f"{revoked['outcome']} at {revoked['time']}" if revoked else "not revoked"
        echo(
            f"session {match['session']}  task {match['task']}  credential {match['credential']}"
            f" ({match['type']} via {match['provider']})"
        )
        echo(f"  issued {match['issued_at']} to {match['requester']}, expires {match['expires_at']}, {state}")
        echo(f"  scope {json.dumps(match['scope'], sort_keys=True)}")
    return 1 if not matches and not as_json else 0


def active(run: Invocation, log: Path | None, no_verify: bool, as_json: bool) -> None:
    items = _fleet_active(run) if log is None else None
    if items is None:
        path = _log_path(run, log)
        _checked(run, path, no_verify)
        items = active_credentials(path, utcnow())
    if as_json:
        echo(json.dumps(items, indent=2))
        return
    columns = ("session", "task", "credential", "type", "expires_at", "scope")
    print_table(
        columns, [[_cell(i[c]) if c != "scope" else json.dumps(i[c], sort_keys=True) for c in columns] for i in items]
    )


def _fleet_active(run: Invocation) -> list[dict[str, Any]] | None:
    """With a shared store (fleet mode), what is live on every host, from the store; else None (read the log)."""
    config = run.load_config()
    if config.store is None:
        return None

    store = open_config_store(config)
    try:
        return fleet_active(store, config.providers, utcnow())
    finally:
        store.close()
