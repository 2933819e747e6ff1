"""``audit verify``: check the issuance log's hash chain, its signed checkpoints and its witness.

Reads the log as bytes, line by line. Each record must be valid JSON, carry
the next ``seq``, point at the previous record's ``hash`` and hash to its own
``hash`` (SHA-256 of the record without ``hash``; records are written as
canonical JSON, so that is the line with its ``"hash"`` member cut out). A
``checkpoint`` must vouch for the record before it and name a known key;
the newest one's Ed25519 signature vouches, through the chain, for every
record before it. A log with records but no checkpoint fails (stripped
checkpoints look exactly like that), and the records after the newest
checkpoint are counted as an unsigned tail. Every witnessed checkpoint
(seq and hash, from objects the host cannot rewrite) must be in the log.
The first failure names its ``seq`` and the kind of damage. The keys an
auditor pins and one checkpoint's signature are ``broker.audit.signatures``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from broker.audit.log import GENESIS, open_for_reading
from broker.audit.signatures import signature_ok
from broker.vocab.errors import BadInput, LogVerificationError


class Damage(Enum):
    EDITED = "edited"
    DELETED = "deleted"
    INSERTED = "inserted"
    REORDERED = "reordered"
    TRUNCATED = "truncated"
    UNSIGNED_TAIL = "unsigned tail"
    BAD_SIGNATURE = "bad signature"
    WITNESS_MISMATCH = "witness mismatch"
    TORN = "torn"


class LogDamage(LogVerificationError):
    """A verification failure at one ``seq``, with the kind of damage."""

    def __init__(self, seq: int, damage: Damage, detail: str) -> None:
        super().__init__(f"seq {seq}: {damage.value}: {detail}")
        self.seq = seq
        self.damage = damage


@dataclass(frozen=True)
class Head:
    seq: int
    hash: str


def parse_head(text: str) -> Head:
    """``SEQ:HASH`` as an auditor noted it."""
    seq, _, digest = text.partition(":")
    if not seq.isdigit() or int(seq) < 1 or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise BadInput(f"--expect-head: {text[:80]!r} is not SEQ:HASH (a seq and a 64-digit hex hash)")
    return Head(int(seq), digest)


@dataclass(frozen=True)
class Resume:
    """A prefix already checked: continue after ``offset`` bytes, which end with record ``seq``/``hash``."""

    offset: int
    seq: int
    hash: str


@dataclass(frozen=True)
class VerifyResult:
    records: int
    checkpoints: int
    last: Head | None
    last_checkpoint: Head | None  # the head the newest checkpoint signs
    unsigned_tail: int
    keys_seen: frozenset[str] = frozenset()
    fingerprint_key_ids: frozenset[str] = frozenset()
    witness_objects: int = 0
    torn_tail: bool = False
    bytes_checked: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "ok": True,
            "records": self.records,
            "checkpoints": self.checkpoints,
            "unsigned_tail": self.unsigned_tail,
            "first_bad_seq": None,
            "reason": None,
            "last_seq": self.last.seq if self.last else 0,
            "last_hash": self.last.hash if self.last else None,
            "signed_seq": self.last_checkpoint.seq if self.last_checkpoint else 0,
            "signed_hash": self.last_checkpoint.hash if self.last_checkpoint else None,
            "keys_seen": sorted(self.keys_seen),
            "witness_objects": self.witness_objects,
        }

    def summary(self, witness: bool) -> str:
        """The one line a human reads: what was checked."""
        signed = self.last_checkpoint
        parts = [
            f"{self.records:,} records",
            f"{self.checkpoints:,} checkpoints"
            + (f" (newest signs seq {signed.seq}, {signed.hash[:16]}...)" if signed else ""),
            f"{len(self.keys_seen)} signing key(s) seen",
            f"unsigned tail {self.unsigned_tail}",
        ]
        if witness:
            parts.append(f"{self.witness_objects:,} witness object(s) matched")
        return "ok: " + ", ".join(parts)


def failure_json(error: LogVerificationError) -> dict[str, object]:
    return {
        "ok": False,
        "records": None,
        "checkpoints": None,
        "unsigned_tail": None,
        "first_bad_seq": error.seq if isinstance(error, LogDamage) else None,
        "reason": error.message,
    }


def _lines(path: Path, offset: int) -> Iterator[bytes]:
    with open_for_reading(path) as handle:
        if offset:
            handle.seek(offset)
        yield from handle


def _body_hash(line: bytes, record_hash: str) -> str:
    member = b',"hash":"' + record_hash.encode() + b'"'
    cut = line.find(member)
    if cut < 0:
        return ""
    return hashlib.sha256(line[:cut] + line[cut + len(member) :]).hexdigest()


@dataclass
class _Pass:
    """What one pass over the lines has seen so far."""

    seq: int
    prev: str
    records: int = 0
    checkpoints: list[tuple[int, dict[str, object]]] = field(default_factory=list)
    key_hosts: Mapping[str, str] | None = None
    newest: tuple[int, dict[str, object]] | None = None
    host_newest: dict[str, tuple[int, dict[str, object]]] = field(default_factory=dict)  # by key id
    host_checkpoints: int = 0
    keys_seen: set[str] = field(default_factory=set)
    fingerprint_key_ids: set[str] = field(default_factory=set)
    witness_objects: int = 0
    bytes_checked: int = 0


def verify_log(
    path: Path, public_keys: Mapping[str, Ed25519PublicKey] | None, *, resume: Resume | None = None, **options: Any
) -> VerifyResult:
    """Verify the log file (see ``verify_stream``)."""
    return verify_stream(_lines(path, resume.offset if resume else 0), str(path), public_keys, resume=resume, **options)


def verify_stream(
    lines: Iterator[bytes],
    where: str,
    public_keys: Mapping[str, Ed25519PublicKey] | None,
    *,
    key_hosts: Mapping[str, str] | None = None,
    expected_heads: tuple[Head, ...] = (),
    witnessed: Mapping[int, frozenset[str]] | None = None,
    allow_torn_tail: bool = False,
    strict: bool = False,
    resume: Resume | None = None,
    hasher: Any = None,
) -> VerifyResult:
    """Verify the log; raise ``LogDamage`` naming the first bad ``seq`` and the kind of damage.

    With ``public_keys`` None only the chain is checked (``audit lookup`` and
    ``audit active``: no key, no signature). Every record's hash and link are
    checked; of the signatures, the newest checkpoint's (a command appends a
    checkpoint at its end, so checking each would cost most of the time); only
    when it fails are the earlier ones checked, to name the first bad one. In
    a fleet's chain (checkpoints naming their ``host``) each host signs with
    its own key: every checkpoint's key must be known and, when ``key_hosts``
    names it, listed for that host; the newest checkpoint of every key has its
    signature checked (each vouches, through the chain, for all before it).
    ``lines`` are the log's lines (a file, or the fleet's table), ``where``
    names it.
    """
    state = _Pass(seq=resume.seq if resume else 0, prev=resume.hash if resume else GENESIS, key_hosts=key_hosts)
    heads = {head.seq: head for head in expected_heads}
    head_mismatch: LogDamage | None = None
    torn = False
    for raw in lines:
        if not raw.endswith(b"\n"):  # a last line without its newline: a write torn by a crash
            torn = True
            break
        _check_line(raw, state, public_keys, lines)
        state.bytes_checked += len(raw)
        if hasher is not None:
            hasher.update(raw)
        if witnessed and state.seq in witnessed:
            if witnessed[state.seq] != {state.prev}:  # an extra object naming another record fails too
                raise LogDamage(
                    state.seq, Damage.WITNESS_MISMATCH, "the witness holds another record at this seq (rewritten)"
                )
            state.witness_objects += len(witnessed[state.seq])
        head = heads.get(state.seq)
        if head is not None and head.hash != state.prev and head_mismatch is None:
            # reported after the signatures: a rehashed edit earlier fails a signature first
            head_mismatch = LogDamage(
                state.seq, Damage.EDITED, f"differs from the expected head {head.seq}:{head.hash[:16]}... (rewritten)"
            )
    if torn and not allow_torn_tail:
        raise LogDamage(
            state.seq + 1,
            Damage.TORN,
            "the last record is torn (a crash during a write); repair it with broker audit verify --repair",
        )
    seq = state.seq
    if seq == 0 and not torn:
        raise LogVerificationError(f"issuance log {where} is empty")
    for head in expected_heads:
        if head.seq > seq:
            raise LogDamage(
                seq + 1, Damage.TRUNCATED, f"the log ends at seq {seq} but seq {head.seq} was recorded earlier"
            )
    if witnessed:
        beyond = [s for s in witnessed if s > seq]
        if beyond:
            raise LogDamage(
                seq + 1,
                Damage.TRUNCATED,
                f"the log ends at seq {seq} but the witness holds checkpoint seq {max(beyond)}",
            )
    last_checkpoint: Head | None = None
    checkpoint_seq = 0
    if state.newest is not None:
        checkpoint_seq, newest = state.newest
        if public_keys is not None:
            _check_signatures(state, public_keys)
        last_checkpoint = Head(checkpoint_seq - 1, str(newest["head_hash"]))
    elif resume is not None:
        checkpoint_seq = resume.seq  # the checked prefix is the caller's; its tail is counted from there
    unsigned = seq - checkpoint_seq
    if public_keys is not None and state.newest is None and seq > 0:
        raise LogDamage(
            1, Damage.UNSIGNED_TAIL, f"{seq} record(s) and no signed checkpoint (checkpoints stripped or never written)"
        )
    if strict and unsigned:
        raise LogDamage(
            checkpoint_seq + 1, Damage.UNSIGNED_TAIL, f"{unsigned} record(s) after the newest checkpoint are not signed"
        )
    if head_mismatch is not None:
        raise head_mismatch
    return VerifyResult(
        records=seq,
        checkpoints=len(state.checkpoints) + state.host_checkpoints,
        last=Head(seq, state.prev) if seq else None,
        last_checkpoint=last_checkpoint,
        unsigned_tail=unsigned,
        keys_seen=frozenset(state.keys_seen),
        fingerprint_key_ids=frozenset(state.fingerprint_key_ids),
        witness_objects=state.witness_objects,
        torn_tail=torn,
        bytes_checked=state.bytes_checked + (resume.offset if resume else 0),
    )


def _check_line(line: bytes, state: _Pass, keys: Mapping[str, Ed25519PublicKey] | None, rest: Iterator[bytes]) -> None:
    expected_seq = state.seq + 1
    try:
        record = orjson.loads(line)
        seq = record["seq"]
        record_hash = record["hash"]
        record_prev = record["prev"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise LogDamage(expected_seq, Damage.EDITED, "not a valid log record") from None
    if seq != expected_seq:
        raise _misplaced(expected_seq, seq, rest)
    if record_prev != state.prev:
        raise LogDamage(seq, Damage.EDITED, f"prev does not match the hash of seq {seq - 1}")
    if not isinstance(record_hash, str) or _body_hash(line.rstrip(b"\n"), record_hash) != record_hash:
        raise LogDamage(seq, Damage.EDITED, "the record does not match its hash")
    event = record.get("event")
    if event == "checkpoint":
        _check_checkpoint_shape(record, keys)
        if "host" in record:  # a fleet's: only each host key's newest is kept (bounded memory)
            if keys is not None:
                _check_host_key(record, state.key_hosts)
            state.host_newest[str(record.get("key_id"))] = (seq, record)
            state.host_checkpoints += 1
        else:
            state.checkpoints.append((seq, record))
        state.newest = (seq, record)
        state.keys_seen.add(str(record.get("key_id")))
    elif event == "credential.issued":
        key_id = record.get("fingerprint_key_id")
        if isinstance(key_id, str):
            state.fingerprint_key_ids.add(key_id)
    state.seq, state.prev = seq, record_hash


def _misplaced(expected: int, found: object, rest: Iterator[bytes]) -> LogDamage:
    """Name the damage when a record carries the wrong seq: deleted, reordered or inserted."""
    if isinstance(found, int) and found > expected:
        for line in rest:  # the chain is broken already; reading on costs nothing that matters
            try:
                if orjson.loads(line).get("seq") == expected:
                    return LogDamage(expected, Damage.REORDERED, f"found seq {found} here; seq {expected} comes later")
            except (orjson.JSONDecodeError, AttributeError):
                continue
        return LogDamage(expected, Damage.DELETED, f"found seq {found} instead; seq {expected} is missing")
    return LogDamage(expected, Damage.INSERTED, f"found seq {found} instead (a record that does not belong here)")


def _check_checkpoint_shape(record: Mapping[str, object], keys: Mapping[str, Ed25519PublicKey] | None) -> None:
    seq = int(str(record["seq"]))
    if record.get("head_seq") != seq - 1 or record.get("head_hash") != record.get("prev"):
        raise LogDamage(seq, Damage.EDITED, "the checkpoint does not vouch for the record before it")
    if keys is not None and str(record.get("key_id")) not in keys:
        raise LogDamage(seq, Damage.BAD_SIGNATURE, f"checkpoint signed by unknown key {str(record.get('key_id'))[:40]}")


def _check_host_key(record: Mapping[str, object], key_hosts: Mapping[str, str] | None) -> None:
    """A fleet checkpoint's key must be the one listed for its ``host`` (when the listing names the key)."""
    seq, key_id, host = int(str(record["seq"])), str(record.get("key_id")), str(record.get("host"))
    listed = (key_hosts or {}).get(key_id)
    if listed is not None and listed != host:
        raise LogDamage(seq, Damage.BAD_SIGNATURE, f"checkpoint of host {host[:64]} signed by the key of {listed[:64]}")


def _check_signatures(state: _Pass, keys: Mapping[str, Ed25519PublicKey]) -> None:
    """The newest checkpoint of each fleet host key, and of a one-host log (naming its first bad one)."""
    for seq, record in sorted(state.host_newest.values(), key=lambda item: item[0]):
        if not signature_ok(record, keys):
            host = str(record.get("host"))[:64]
            raise LogDamage(
                seq, Damage.BAD_SIGNATURE, f"host {host}'s newest checkpoint fails its signature (a forgery)"
            )
    if state.checkpoints and not signature_ok(state.checkpoints[-1][1], keys):
        for number, checkpoint in state.checkpoints:
            if not signature_ok(checkpoint, keys):
                raise LogDamage(
                    number, Damage.BAD_SIGNATURE, "the checkpoint's signature fails (edited records or a forgery)"
                )
