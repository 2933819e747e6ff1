"""The audit commands' fleet side: the one chain a PostgreSQL store keeps for every host.

With ``store = "postgresql://..."`` the issuance log is the store's
``issuance_log`` table, not ``state_dir/issuance.jsonl``: ``audit export``
writes it as JSON lines, ``audit verify --store URL`` checks it in place
(streamed), ``audit list``/``lookup`` read it, and ``audit public-key`` lists
every host's signing key. The keys a check trusts are the auditor's own
(``--public-key``) when given; the ones the store lists otherwise, with a
note, since whoever writes the database can list a key too.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from broker.audit.keys import FingerprintKeys, load_or_create_keys, load_signing_keys
from broker.audit.pglog import TableSource
from broker.audit.signatures import parse_pinned_keys
from broker.audit.verify import Head, VerifyResult, verify_stream
from broker.cli.context import Invocation, echo
from broker.core.inputs.config import Config
from broker.core.store import open_config_store, read_fleet_log
from broker.vocab.errors import BadInput, BrokerError
from broker.vocab.files import read_bounded, write_private_file

CHUNK_BYTES = 1 << 20
MAX_KEY_FILE = 1 << 20  # a fleet's key lines: far below this


def pinned_keys(config: Config | None, public_key: Path | None) -> tuple[dict[str, Ed25519PublicKey], dict[str, str]]:
    """The keys (and, from a fleet's listing, their hosts) in ``--public-key``, else this host's own keys."""

    if public_key is not None:
        try:  # the one bounded reader: a FIFO or a huge file named here fails instead of hanging
            raw, _ = read_bounded(public_key, MAX_KEY_FILE)
            return parse_pinned_keys(raw.decode("utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(f"public key file {public_key}: {getattr(exc, 'strerror', None) or 'unreadable'}") from None

    assert config is not None  # only --log or --store with --public-key runs without a config
    return parse_pinned_keys("\n".join(load_signing_keys(config.audit_key).public_key_lines()))


def store_head(config: Config) -> list[Head]:
    """The newest checkpoint the session store recorded (a truncation check against the live log)."""

    store = open_config_store(config)
    try:
        head = store.log_head()
    finally:
        store.close()
    return [Head(*head)] if head else []


def optional_config(run: Invocation) -> Config | None:
    """The config when there is one (an auditor's machine may have none)."""

    try:
        return run.load_config()
    except BrokerError:
        return None


def fleet_target(run: Invocation, log: Path | None, store: str | None) -> tuple[str, Path | None] | None:
    """The fleet log to read (URL, pgpass file): ``--store``, else the config's store unless ``--log`` is given."""
    if store is not None:
        config = optional_config(run)  # none: libpq's own pgpass file
        same = config is not None and config.store is not None and config.store.url == store
        return store, config.store.passfile if same and config and config.store else None
    if log is not None:
        return None
    config = run.load_config()
    return (config.store.url, config.store.passfile) if config.store is not None else None


@contextlib.contextmanager
def log_source(run: Invocation, log: Path | None) -> Iterator[Path | TableSource]:
    """What ``audit list``/``lookup`` read: ``--log``, the fleet's table, or this host's file."""
    target = fleet_target(run, log, None)
    if target is None:
        yield log if log is not None else Path(run.load_config().state_dir) / "issuance.jsonl"
        return

    with read_fleet_log(*target) as source:
        yield source


def fleet_keys_partly_held(source: Path | TableSource, keys: FingerprintKeys, seen: frozenset[str]) -> bool:
    """In a fleet whose hosts keep their own fingerprint keys, search with the ones held and say which are not."""
    held = keys.key_ids()
    if isinstance(source, Path) or not seen & held:
        return False
    others = sorted(seen - held)
    if others:
        echo(
            f"note: the fleet's log also holds fingerprints made with {len(others)} key(s) this host does not hold"
            f" ({', '.join(others[:3])}); those credentials are not searched (give every host one fingerprint_key)",
            err=True,
        )
    return True


def check_fleet_chain(source: TableSource) -> VerifyResult:
    """The chain check before reading the fleet's log (no keys; ``verify`` checks signatures)."""

    result = verify_stream(source.lines(), source.where, None)
    if result.unsigned_tail:
        echo(f"note: {result.unsigned_tail} record(s) after the newest checkpoint are not signed yet", err=True)
    return result


def verify_fleet(
    target: tuple[str, Path | None],
    public_key: Path | None,
    *,
    expected: tuple[Head, ...],
    witnessed: Mapping[int, frozenset[str]] | None,
    strict: bool,
) -> VerifyResult:
    """``audit verify`` of the fleet's chain in the store, streamed; every host's checkpoint checked."""

    with read_fleet_log(*target) as source:
        if public_key is not None:
            keys, hosts = pinned_keys(None, public_key)
        else:
            listed = source.keys()
            echo(
                f"note: checking with the {len(listed)} key(s) the store lists; pin them with --public-key"
                " (broker audit public-key) for a check the database cannot fool",
                err=True,
            )
            keys, hosts = parse_pinned_keys("\n".join(f"{k[2]} {k[1]}" for k in listed)) if listed else ({}, {})
        lines = source.lines()
        return verify_stream(
            lines, source.where, keys, key_hosts=hosts, expected_heads=expected, witnessed=witnessed, strict=strict
        )


def _chunks(lines: Iterable[bytes]) -> Iterator[bytes]:
    batch: list[bytes] = []
    size = 0
    for line in lines:
        batch.append(line)
        size += len(line)
        if size >= CHUNK_BYTES:
            yield b"".join(batch)
            batch, size = [], 0
    if batch:
        yield b"".join(batch)


class _Counted:
    def __init__(self, lines: Iterable[bytes]) -> None:
        self._lines = lines
        self.count = 0

    def __iter__(self) -> Iterator[bytes]:
        for line in self._lines:
            self.count += 1
            yield line


def export(run: Invocation, output: Path | None, store: str | None) -> None:

    target = fleet_target(run, None, store)
    if target is None:
        raise BadInput('audit export reads a fleet\'s log: set store = "postgresql://..." or give --store URL')
    with read_fleet_log(*target) as source:
        lines = _Counted(source.lines())
        if output is None:
            binary = getattr(sys.stdout, "buffer", None)  # the bytes as stored; a text stream (tests) gets text
            for chunk in _chunks(lines):
                binary.write(chunk) if binary is not None else sys.stdout.write(chunk.decode("utf-8"))
            sys.stdout.flush()
        else:
            try:
                write_private_file(output.parent, output.name, _chunks(lines), mode=0o600, durable=True)
            except (OSError, ValueError) as exc:
                raise BadInput(f"--output {output}: {getattr(exc, 'strerror', None) or exc}") from None
    echo(f"exported {lines.count:,} records from {source.where}", err=True)


def fleet_public_keys(config: Config) -> list[str]:
    """Every host's signing key, ``ed25519:<base64> HOST`` (this host's listed first if it never signed yet)."""

    assert config.store is not None
    keys = load_or_create_keys(config.audit_key, config.fingerprint_key)
    store = open_config_store(config)
    try:
        log: Any = store.issuance_log(keys)
        log.list_key()
    finally:
        store.close()
    with read_fleet_log(config.store.url, config.store.passfile) as source:
        listed = source.keys()
    lines = [f"{public} {host}" for _, host, public, _ in listed]
    own = [line for line in keys.public_key_lines() if not any(item[2] == line for item in listed)]
    return lines + [f"{line} {config.host}" for line in own]
