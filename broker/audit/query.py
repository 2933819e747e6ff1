"""Reading the issuance log as an auditor: filtered listings, leaked-secret lookup, live credentials.

Everything here works on any copy of the log; nothing needs the broker's
state. Lookup takes the HMAC keys (current and retired) and the leaked
secret, computes its fingerprint and drops the secret.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from broker.audit.keys import FingerprintKeys
from broker.audit.log import open_for_reading
from broker.vocab.errors import BadInput, ConfigError
from broker.vocab.files import FileTooLarge, NotRegularFile, read_bounded
from broker.vocab.secret import Secret
from broker.vocab.time import parse_iso

MAX_LEAKED_SECRET_BYTES = 64 * 1024


@dataclass(frozen=True)
class RecordFilter:
    session: str | None = None
    task: str | None = None
    provider: str | None = None
    event: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def matches(self, record: dict[str, Any]) -> bool:
        if self.session is not None and record.get("session") != self.session:
            return False
        if self.task is not None and record.get("task") != self.task:
            return False
        if self.provider is not None and record.get("provider") != self.provider:
            return False
        if self.event is not None and record.get("event") != self.event:
            return False
        if self.since is not None or self.until is not None:
            moment = parse_iso(str(record.get("time")))
            if self.since is not None and moment < self.since:
                return False
            if self.until is not None and moment > self.until:
                return False
        return True


class LogSource(Protocol):
    """Where the log's lines come from when it is not a file: the fleet's table (``broker.audit.pglog``)."""

    def lines(self) -> Iterator[bytes]:
        """Every record, in ``seq`` order, each ending with a newline."""
        ...

    def lines_containing(self, needles: Iterable[bytes]) -> Iterator[bytes]:
        """The records (without newline) holding any of ``needles``, in ``seq`` order."""
        ...


def _file_lines(path: Path) -> Iterator[bytes]:
    with open_for_reading(path) as handle:
        yield from handle


def read_records(source: Path | LogSource) -> Iterator[dict[str, Any]]:
    lines = _file_lines(source) if isinstance(source, Path) else source.lines()
    for number, line in enumerate(lines, start=1):
        if not line.endswith(b"\n"):
            return  # a torn tail; audit verify reports it
        try:
            record = json.loads(line)
        except ValueError:
            raise BadInput(f"issuance log line {number} is not JSON (run broker audit verify)") from None
        if not isinstance(record, dict):
            raise BadInput(f"issuance log line {number} is not a record (run broker audit verify)")
        yield record


def list_records(source: Path | LogSource, record_filter: RecordFilter) -> Iterator[dict[str, Any]]:
    return (r for r in read_records(source) if record_filter.matches(r))


def read_leaked_secret(source: Path | None, stdin: bytes | None) -> list[Secret]:
    """The candidate secrets in a leaked file (as is, and without surrounding whitespace)."""
    if source is not None:
        try:  # the one bounded reader: a directory or FIFO is refused, never waited on
            data, _ = read_bounded(source, MAX_LEAKED_SECRET_BYTES)
        except FileTooLarge:
            raise BadInput("the secret is larger than 64 KiB; give the token alone") from None
        except NotRegularFile as exc:
            raise BadInput(
                f"secret file {source} is {'a directory' if exc.is_directory else 'not a regular file'}"
            ) from None
        except OSError as exc:
            raise BadInput(f"secret file {source}: {exc.strerror}") from None
    else:
        data = stdin or b""
    if len(data) > MAX_LEAKED_SECRET_BYTES:
        raise BadInput("the secret is larger than 64 KiB; give the token alone")
    candidates = {data, data.strip()}
    candidates.discard(b"")
    if not candidates:
        raise BadInput("the secret is empty")
    return [Secret(c) for c in candidates]


def _lines_containing(source: Path | LogSource, needles: Iterable[bytes]) -> Iterator[bytes]:
    """The whole lines of the log that contain any of ``needles`` (a byte search, no parsing)."""
    if not isinstance(source, Path):
        yield from source.lines_containing(needles)
        return
    path = source
    with open_for_reading(path) as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            starts: set[int] = set()
            for needle in needles:
                position = data.find(needle)
                while position >= 0:
                    starts.add(data.rfind(b"\n", 0, position) + 1)
                    position = data.find(needle, position + len(needle))
            for start in sorted(starts):
                end = data.find(b"\n", start)
                if end >= 0:
                    yield data[start:end]


KEY_ID_MEMBER = b'"fingerprint_key_id":"'


def newest_fingerprint_key_id(path: Path) -> str | None:
    """The fingerprint key id the newest ``credential.issued`` record names (a backward byte search)."""
    with open_for_reading(path) as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return None
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            position = data.rfind(KEY_ID_MEMBER)
            if position < 0:
                return None
            start = position + len(KEY_ID_MEMBER)
            end = data.find(b'"', start, start + 64)
            return data[start:end].decode("ascii", "replace") if end > 0 else None


def check_fingerprint_keys(
    source: Path | LogSource, keys: FingerprintKeys, key_path: Path, seen: Iterable[str] = ()
) -> None:
    """Refuse a lookup whose answer "not found" would be meaningless: the log names a key we do not hold."""
    named = set(seen)
    newest = newest_fingerprint_key_id(source) if isinstance(source, Path) else None
    if newest is not None:
        named.add(newest)
    unknown = sorted(named - keys.key_ids())
    if unknown:
        raise ConfigError(
            f"fingerprint key {key_path} (key id {keys.key_id}) is not the key the log's fingerprints were made"
            f" with ({', '.join(unknown[:3])}); a lookup with it would find nothing: restore the right fingerprint key"
        )


def lookup(source: Path | LogSource, fingerprints: Iterable[str]) -> list[dict[str, Any]]:
    """Issued credentials whose fingerprint is one of ``fingerprints``, with what happened to them.

    A byte search finds the few lines naming a fingerprint (and then those
    naming its session), so a million-record log is not parsed line by line.
    """
    wanted = set(fingerprints)
    issued = [json.loads(line) for line in _lines_containing(source, (f'"{f}"'.encode() for f in wanted))]
    sessions = {str(r.get("session")) for r in issued if r.get("fingerprint") in wanted}
    related = [json.loads(line) for line in _lines_containing(source, (f'"{s}"'.encode() for s in sessions))]
    matches: dict[tuple[str, str], dict[str, Any]] = {}
    for record in sorted(related, key=lambda r: int(r.get("seq", 0))):
        event = record.get("event")
        key = (str(record.get("session")), str(record.get("credential")))
        if event == "credential.issued" and record.get("fingerprint") in wanted:
            matches[key] = {
                "session": record.get("session"),
                "task": record.get("task"),
                "credential": record.get("credential"),
                "provider": record.get("provider"),
                "type": record.get("type"),
                "requester": record.get("requester"),
                "scope": record.get("scope"),
                "reference": record.get("reference"),
                "issued_at": record.get("time"),
                "expires_at": record.get("expires_at"),
                "revoked": None,
            }
        elif event == "credential.revoked" and key in matches:
            matches[key]["revoked"] = {"time": record.get("time"), "outcome": record.get("outcome")}
    return list(matches.values())


def active_credentials(source: Path | LogSource, now: datetime) -> list[dict[str, Any]]:
    """Credentials issued, not revoked and not expired at ``now``."""
    live: dict[tuple[str, str], dict[str, Any]] = {}
    for record in read_records(source):
        key = (str(record.get("session")), str(record.get("credential")))
        event = record.get("event")
        if event == "credential.issued":
            live[key] = record
        elif event == "credential.revoked" and record.get("outcome") in ("revoked", "expired"):
            live.pop(key, None)
    result = []
    for record in live.values():
        if parse_iso(str(record["expires_at"])) > now:
            result.append(
                {
                    "session": record.get("session"),
                    "task": record.get("task"),
                    "credential": record.get("credential"),
                    "provider": record.get("provider"),
                    "type": record.get("type"),
                    "scope": record.get("scope"),
                    "expires_at": record.get("expires_at"),
                }
            )
    return result
