"""The issuance log: append-only JSON lines with a SHA-256 hash chain and signed checkpoints.

Each record has ``seq``, ``time``, ``event``, ``session``, ``task``,
``requester``, ``prev`` and ``hash`` (SHA-256 of the canonical JSON of the
record without ``hash``). Appends happen under a file lock (``filelock``),
each record is written with one ``write`` on an ``O_APPEND`` descriptor and
fsynced before the call returns; one the disk cannot take whole is cut off
again (nothing torn is left). ``append_many`` writes several records the
same way at once (one lock, one write, one fsync: what a busy proxy's
``egress.request`` records need). ``checkpoint()`` appends a record signed
with Ed25519 over the head, so a copy of the log verifies offline.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from filelock import FileLock, Timeout

from broker.audit.keys import AuditKeys
from broker.vocab.errors import BadInput, LogVerificationError, StoreError
from broker.vocab.time import iso_precise, utcnow
from broker.vocab.tracing import span

GENESIS = "0" * 64
LOG_NAME = "issuance.jsonl"


def canonical(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def record_hash(record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "hash"}
    return hashlib.sha256(canonical(body)).hexdigest()


def checkpoint_message(seq: int, head_hash: str) -> bytes:
    """The bytes a checkpoint signs: the head it vouches for."""
    return f"broker-checkpoint:v1:{seq}:{head_hash}".encode()


def new_record(
    seq: int, prev: str, event: str, session: str | None, task: str | None, requester: str, fields: dict[str, Any]
) -> dict[str, Any]:
    """Record ``seq`` after the record whose hash is ``prev``, with its own ``hash``: the one record format."""
    record: dict[str, Any] = {
        "seq": seq,
        "time": iso_precise(utcnow()),
        "event": event,
        "session": session,
        "task": task,
        "requester": requester,
        "prev": prev,
        **fields,
    }
    record["hash"] = record_hash(record)
    return record


def checkpoint_fields(keys: AuditKeys, seq: int, head_hash: str) -> dict[str, Any]:
    """What a checkpoint over head ``seq``/``head_hash`` holds besides the common fields: the signed head."""
    signature = keys.private_key().sign(checkpoint_message(seq, head_hash))
    return {
        "head_seq": seq,
        "head_hash": head_hash,
        "key_id": keys.key_id,
        "signature": base64.b64encode(signature).decode(),
    }


@dataclass(frozen=True)
class Entry:
    """One record to append: its event, the common fields, and the event's own fields."""

    event: str
    session: str | None
    task: str | None
    requester: str
    fields: Mapping[str, Any]


class AppendLog(Protocol):
    """What the core writes the log through: this file (one host) or the fleet's table (``broker.audit.pglog``)."""

    appended: int

    def append(
        self, event: str, *, session: str | None, task: str | None, requester: str, **fields: Any
    ) -> dict[str, Any]: ...

    def append_many(self, entries: Sequence[Entry]) -> list[dict[str, Any]]:
        """Append ``entries`` in order, at once (all of them or, when it raises, none)."""
        ...

    def head(self) -> tuple[int, str]:
        """The last record's ``seq`` and ``hash``; raises when the log could not take another record."""
        ...

    def checkpoint(self, requester: str) -> dict[str, Any] | None:
        """Sign the head when this process appended anything since its last checkpoint."""
        ...


def read_last_line(fd: int) -> bytes | None:
    """The last line of the file (without its newline); None for an empty file."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None
    end = size - 1 if os.pread(fd, 1, size - 1) == b"\n" else size
    buffer = b""
    position = end
    while True:
        start = max(0, position - 8192)
        buffer = os.pread(fd, position - start, start) + buffer
        cut = buffer.rfind(b"\n")
        if cut >= 0:
            return buffer[cut + 1 :]
        if start == 0:
            return buffer
        position = start


def _open_log(path: Path, flags: int) -> int:
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreError(f"issuance log {path} is a symbolic link; remove it") from None
        raise StoreError(f"issuance log {path}: {exc.strerror}") from None


class IssuanceLog:
    def __init__(self, state_dir: Path, keys: AuditKeys, *, lock_timeout: float = 30.0) -> None:
        self.path = state_dir / LOG_NAME
        self.keys = keys
        self._lock = FileLock(str(state_dir / (LOG_NAME + ".lock")), timeout=lock_timeout)
        self.appended = 0

    def append(
        self,
        event: str,
        *,
        session: str | None,
        task: str | None,
        requester: str,
        **fields: Any,
    ) -> dict[str, Any]:
        try:
            with span("log.append", event=event, session=session) as traced, self._lock:
                record = self._append_locked(event, session, task, requester, fields)
                traced.set(seq=record["seq"])
                return record
        except Timeout:
            raise StoreError(f"issuance log {self.path} is locked by another process") from None

    def append_many(self, entries: Sequence[Entry]) -> list[dict[str, Any]]:
        if not entries:
            return []
        try:
            with self._lock:
                return self._append_all(entries)
        except Timeout:
            raise StoreError(f"issuance log {self.path} is locked by another process") from None

    def _append_locked(
        self, event: str, session: str | None, task: str | None, requester: str, fields: dict[str, Any]
    ) -> dict[str, Any]:
        return self._append_all([Entry(event, session, task, requester, fields)])[0]

    def _append_all(self, entries: Sequence[Entry]) -> list[dict[str, Any]]:
        fd = _open_log(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        try:
            seq, prev = self._head(fd)
            records = []
            for entry in entries:
                seq += 1
                record = new_record(
                    seq, prev, entry.event, entry.session, entry.task, entry.requester, dict(entry.fields)
                )
                records.append(record)
                prev = record["hash"]
            data = b"".join(canonical(record) + b"\n" for record in records)
            self._write(fd, data)
        finally:
            os.close(fd)
        self.appended += len(records)
        return records

    def _write(self, fd: int, data: bytes) -> None:
        """``data`` at the end of the log and on disk, or none of it: a write the disk cannot take whole (it is
        full) is cut off again, so a full disk never leaves a torn record behind."""
        end = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            while written < len(data):  # a regular file takes it whole; a short write goes on where it stopped
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, end)
            raise StoreError(f"issuance log {self.path}: {exc.strerror}; the records were not written") from None

    def head(self) -> tuple[int, str]:
        """The last record's ``seq`` and ``hash``; raises when the log could not take another record. An end that
        looks torn may be a record another thread or process is appending: it is read again under the lock, where
        every write is whole, before it counts as torn (the lock is not waited for otherwise)."""
        try:
            return self._read_head()
        except LogVerificationError:
            try:
                with self._lock:
                    return self._read_head()
            except Timeout:
                raise StoreError(f"issuance log {self.path} is locked by another process") from None

    def _read_head(self) -> tuple[int, str]:
        fd = _open_log(self.path, os.O_RDONLY | os.O_CREAT)
        try:
            return self._head(fd)
        finally:
            os.close(fd)

    def _head(self, fd: int) -> tuple[int, str]:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0, GENESIS
        if os.pread(fd, 1, size - 1) != b"\n":
            raise LogVerificationError(
                f"issuance log {self.path} ends in a torn record; run broker audit verify --repair"
            )
        last = read_last_line(fd)
        try:
            record = json.loads(last or b"")
            return int(record["seq"]), str(record["hash"])
        except (ValueError, KeyError, TypeError):
            raise LogVerificationError(f"issuance log {self.path}: the last record is not valid") from None

    def checkpoint(self, requester: str) -> dict[str, Any] | None:
        """Sign the current head when this process appended anything since its last checkpoint."""
        if self.appended == 0:
            return None
        try:
            with self._lock:
                fd = _open_log(self.path, os.O_RDONLY)
                try:
                    seq, head = self._head(fd)
                finally:
                    os.close(fd)
                record = self._append_locked(
                    "checkpoint", None, None, requester, checkpoint_fields(self.keys, seq, head)
                )
        except Timeout:
            raise StoreError(f"issuance log {self.path} is locked by another process") from None
        self.appended = 0
        return record


def open_for_reading(path: Path) -> BinaryIO:
    """The log (or an auditor's copy of it) opened for reading; a one-line error when it is not there."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise BadInput(f"issuance log {path} not found") from None
    except IsADirectoryError:
        raise BadInput(f"issuance log {path} is a directory") from None
    except OSError as exc:
        raise BadInput(f"issuance log {path}: {exc.strerror}") from None
