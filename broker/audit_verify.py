"""``audit verify``: check the issuance log's hash chain and its signed checkpoints.

Reads the log as bytes, line by line. Each record must be valid JSON, carry
the next ``seq``, point at the previous record's ``hash`` and hash to its own
``hash`` (SHA-256 of the record without ``hash``; records are written as
canonical JSON, so that is the line with its ``"hash"`` member cut out). A
``checkpoint`` must vouch for the record before it and carry a valid Ed25519
signature by a known key. The first failure names its ``seq``.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from broker.auditkeys import key_id_for
from broker.errors import BadInput, LogVerificationError
from broker.issuance_log import GENESIS, checkpoint_message, open_for_reading


@dataclass(frozen=True)
class Head:
    seq: int
    hash: str


@dataclass(frozen=True)
class VerifyResult:
    records: int
    last: Head | None
    last_checkpoint: Head | None
    torn_tail: bool

    def to_json(self) -> dict[str, object]:
        return {
            "records": self.records,
            "last_seq": self.last.seq if self.last else 0,
            "last_hash": self.last.hash if self.last else None,
            "signed_seq": self.last_checkpoint.seq if self.last_checkpoint else 0,
            "signed_hash": self.last_checkpoint.hash if self.last_checkpoint else None,
        }


def parse_public_keys(text: str) -> dict[str, Ed25519PublicKey]:
    """``ed25519:<base64>`` lines (current and retired keys) by key id."""
    keys: dict[str, Ed25519PublicKey] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            raw = base64.b64decode(line.removeprefix("ed25519:"), validate=True)
            keys[key_id_for(raw)] = Ed25519PublicKey.from_public_bytes(raw)
        except ValueError:
            raise BadInput(f"public key file line {number}: not an ed25519:<base64> key") from None
    if not keys:
        raise BadInput("public key file holds no key")
    return keys


def _lines(path: Path) -> Iterator[bytes]:
    with open_for_reading(path) as handle:
        yield from handle


def _body_hash(line: bytes, record_hash: str) -> str:
    member = b',"hash":"' + record_hash.encode() + b'"'
    cut = line.find(member)
    if cut < 0:
        return ""
    return hashlib.sha256(line[:cut] + line[cut + len(member) :]).hexdigest()


def verify_log(
    path: Path,
    public_keys: Mapping[str, Ed25519PublicKey],
    *,
    expected_head: Head | None = None,
    allow_torn_tail: bool = False,
) -> VerifyResult:
    """Verify the whole log; raise ``LogVerificationError`` naming the first bad ``seq``.

    Every record's hash and link are checked. Of the signatures, the last
    checkpoint's is checked: it signs the hash of the record before it, which
    chains to every earlier record, so a valid last signature vouches for all
    of them (a command appends a checkpoint after every few records, so
    checking each would cost most of the time). Only when it fails are the
    earlier checkpoints checked, to name the first bad one.
    """
    prev = GENESIS
    seq = 0
    checkpoints: list[tuple[int, dict[str, object]]] = []
    torn = False
    head_mismatch: LogVerificationError | None = None
    pending: bytes | None = None
    for raw in _lines(path):
        if pending is not None:
            _check_line(pending, seq + 1, prev, public_keys)
        pending = raw
        if raw.endswith(b"\n"):
            record = _check_line(raw, seq + 1, prev, public_keys)
            pending = None
            seq, prev = record.seq, record.hash
            if expected_head is not None and seq == expected_head.seq and prev != expected_head.hash:
                # reported after the signatures: a rehashed edit earlier fails a signature first
                head_mismatch = LogVerificationError(f"seq {seq}: differs from the head the session store recorded")
            if record.checkpoint is not None:
                checkpoints.append((record.seq, record.checkpoint))
    if pending is not None:  # a last line without its newline: a write torn by a crash
        if not allow_torn_tail:
            raise LogVerificationError(
                f"seq {seq + 1}: the last record is torn (a crash during a write); "
                "repair it with broker audit verify --repair"
            )
        torn = True
    if seq == 0 and not torn:
        raise LogVerificationError(f"issuance log {path} is empty")
    if expected_head is not None and expected_head.seq > seq:
        raise LogVerificationError(
            f"seq {seq + 1}: the log ends at seq {seq} but a checkpoint of seq {expected_head.seq} was recorded"
            " (truncated)"
        )
    last_checkpoint: Head | None = None
    if checkpoints:
        last_seq, last = checkpoints[-1]
        if not _signature_ok(last, public_keys):
            for checkpoint_seq, checkpoint in checkpoints:
                if not _signature_ok(checkpoint, public_keys):
                    raise LogVerificationError(f"seq {checkpoint_seq}: bad checkpoint signature")
        last_checkpoint = Head(last_seq - 1, str(last["head_hash"]))
    if head_mismatch is not None:
        raise head_mismatch
    return VerifyResult(seq, Head(seq, prev) if seq else None, last_checkpoint, torn)


@dataclass(frozen=True)
class _Checked:
    seq: int
    hash: str
    prev: str
    checkpoint: dict[str, object] | None


def _check_line(line: bytes, expected_seq: int, prev: str, keys: Mapping[str, Ed25519PublicKey]) -> _Checked:
    try:
        record = orjson.loads(line)
        seq = record["seq"]
        record_hash = record["hash"]
        record_prev = record["prev"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise LogVerificationError(f"seq {expected_seq}: not a valid log record") from None
    if seq != expected_seq:
        raise LogVerificationError(
            f"seq {expected_seq}: found seq {seq} instead (a record was deleted, inserted or reordered)"
        )
    if record_prev != prev:
        raise LogVerificationError(f"seq {seq}: prev does not match the hash of seq {seq - 1}")
    if not isinstance(record_hash, str) or _body_hash(line.rstrip(b"\n"), record_hash) != record_hash:
        raise LogVerificationError(f"seq {seq}: the record does not match its hash (edited)")
    checkpoint = None
    if record.get("event") == "checkpoint":
        _check_checkpoint_shape(record, keys)
        checkpoint = record
    return _Checked(seq, record_hash, record_prev, checkpoint)


def _check_checkpoint_shape(record: Mapping[str, object], keys: Mapping[str, Ed25519PublicKey]) -> None:
    seq = record["seq"]
    if record.get("head_seq") != int(str(seq)) - 1 or record.get("head_hash") != record.get("prev"):
        raise LogVerificationError(f"seq {seq}: the checkpoint does not vouch for the record before it")
    if str(record.get("key_id")) not in keys:
        raise LogVerificationError(f"seq {seq}: checkpoint signed by unknown key {record.get('key_id')}")


def _signature_ok(record: Mapping[str, object], keys: Mapping[str, Ed25519PublicKey]) -> bool:
    key = keys[str(record.get("key_id"))]
    try:
        signature = base64.b64decode(str(record.get("signature")), validate=True)
        key.verify(signature, checkpoint_message(int(str(record["head_seq"])), str(record["head_hash"])))
    except (ValueError, InvalidSignature):
        return False
    return True


def repair_torn_tail(path: Path) -> int:
    """Cut a torn last line; returns the number of bytes removed."""
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return 0
        position = size
        while position > 0:
            start = max(0, position - 8192)
            chunk = os.pread(fd, position - start, start)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                break
            position = start
        else:
            keep = 0
        os.ftruncate(fd, keep)
        os.fsync(fd)
        return size - keep
    finally:
        os.close(fd)
