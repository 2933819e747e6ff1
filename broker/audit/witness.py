"""The witness: every checkpoint also written to S3 under Object Lock (COMPLIANCE), where the host cannot rewrite it.

Someone who can write the host can rewrite the whole log and re-sign it with
fresh keys; they cannot delete or change a COMPLIANCE-locked object before its
retention ends, not even as the bucket's owner. So ``audit verify --witness``
holds the log against every witnessed checkpoint, as CloudTrail's digest files
let an auditor do. One object per checkpoint, named
``PREFIX/<seq, 20 digits>-<record hash>.json`` with the checkpoint record as
its body; the name alone says what the log must hold, and every version of
every object is read (a newer version or a delete marker cannot hide an older
one). A checkpoint is first kept pending in the session store and dropped only
once its object is written, so an outage loses nothing: the next command and
``sweep`` retry. Nothing here prints or exits.

It owns its address (``WitnessConfig``, ``[audit] witness`` and ``audit verify
--witness``) and declares the little it needs from the session store
(``WitnessQueue``), which the store implements: the audit layer does not
import the core.
"""

from __future__ import annotations

import base64
import hashlib
import re
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from broker.audit.log import canonical
from broker.vocab.errors import BadInput, ConfigError, LogVerificationError
from broker.vocab.time import iso, parse_iso

OBJECT_NAME = re.compile(r"([0-9]{20})-([0-9a-f]{64})\.json")
WITNESS_URL = re.compile(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/([A-Za-z0-9!_.*'()/-]{0,512}))?")
DEFAULT_WITNESS_RETENTION = 400 * 86400


@dataclass(frozen=True)
class WitnessConfig:
    """``[audit] witness``: an S3 bucket with Object Lock where every checkpoint is also written."""

    bucket: str
    prefix: str
    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    retention: int = DEFAULT_WITNESS_RETENTION  # seconds of COMPLIANCE retention per object
    interval: int = 0  # 0: every checkpoint; else only the newest, once per interval

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_witness_url(value: str, field: str) -> tuple[str, str]:
    match = WITNESS_URL.fullmatch(value)
    if match is None:
        raise ConfigError(f"{field}: {value[:60]!r} is not s3://BUCKET/PREFIX")
    return match.group(1), (match.group(2) or "").strip("/")


class WitnessQueue(Protocol):
    """Where checkpoints wait for the witness, and how its last write went: the session store keeps both."""

    @abstractmethod
    def add_witness_pending(self, seq: int, record_hash: str, body: str, created_at: str, *, only: bool) -> None:
        """Keep a checkpoint for the witness until written (``only``: drop older pending ones)."""

    @abstractmethod
    def witness_pending(self) -> list[tuple[int, str, str, str]]:
        """Pending checkpoints, oldest first: (seq, hash, body, created_at)."""

    @abstractmethod
    def drop_witness_pending(self, seq: int) -> None: ...

    @abstractmethod
    def set_witness_status(self, *, success_at: str | None, error: str | None) -> None: ...

    @abstractmethod
    def witness_status(self) -> dict[str, str | None]: ...


def object_key(witness: WitnessConfig, seq: int, record_hash: str) -> str:
    name = f"{seq:020d}-{record_hash}.json"
    return f"{witness.prefix}/{name}" if witness.prefix else name


def client(witness: WitnessConfig) -> Any:
    import boto3
    from botocore.config import Config as BotoConfig

    session = boto3.session.Session(profile_name=witness.profile) if witness.profile else boto3.session.Session()
    return session.client(
        "s3",
        region_name=witness.region,
        endpoint_url=witness.endpoint_url,
        config=BotoConfig(connect_timeout=3, read_timeout=10, retries={"max_attempts": 2, "mode": "standard"}),
    )


def put_checkpoint(s3: Any, witness: WitnessConfig, seq: int, record_hash: str, body: bytes, now: datetime) -> None:
    s3.put_object(
        Bucket=witness.bucket,
        Key=object_key(witness, seq, record_hash),
        Body=body,
        ContentType="application/json",
        ContentMD5=base64.b64encode(hashlib.md5(body).digest()).decode(),  # noqa: S324 - S3 asks for MD5 here
        ObjectLockMode="COMPLIANCE",
        ObjectLockRetainUntilDate=now + timedelta(seconds=witness.retention),
    )


def note_checkpoint(store: WitnessQueue, witness: WitnessConfig, record: Mapping[str, Any], now: datetime) -> None:
    """Keep a new checkpoint pending for the witness (with an interval, only the newest is kept)."""
    store.add_witness_pending(
        int(record["seq"]), str(record["hash"]), canonical(dict(record)).decode(), iso(now), only=witness.interval > 0
    )


@dataclass(frozen=True)
class FlushResult:
    written: int
    pending: int
    error: str | None = None


def flush(store: WitnessQueue, witness: WitnessConfig, now: datetime, *, s3: Any = None) -> FlushResult:
    """Write every pending checkpoint that is due; a failure keeps it pending and is remembered for doctor."""
    pending = store.witness_pending()
    if not pending:
        return FlushResult(0, 0)
    status = store.witness_status()
    last = status.get("last_success_at")
    if witness.interval and last and now - parse_iso(str(last)) < timedelta(seconds=witness.interval):
        return FlushResult(0, len(pending))
    written = 0
    try:
        s3 = s3 if s3 is not None else client(witness)
        for seq, record_hash, body, _ in pending:
            put_checkpoint(s3, witness, seq, record_hash, body.encode(), now)
            store.drop_witness_pending(seq)
            written += 1
    except Exception as exc:  # botocore's errors, a missing SDK or profile: kept pending, reported by doctor
        message = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        store.set_witness_status(success_at=None, error=message)
        return FlushResult(written, len(pending) - written, message)
    store.set_witness_status(success_at=iso(now), error=None)
    return FlushResult(written, 0)


def witnessed_checkpoints(witness: WitnessConfig, *, s3: Any = None) -> dict[int, frozenset[str]]:
    """Every witnessed (seq -> record hashes), from every version of every object under the prefix."""
    s3 = s3 if s3 is not None else client(witness)
    found: dict[int, set[str]] = {}
    prefix = f"{witness.prefix}/" if witness.prefix else ""
    try:
        pages = s3.get_paginator("list_object_versions").paginate(Bucket=witness.bucket, Prefix=prefix)
        for page in pages:
            for item in page.get("Versions", []):
                name = str(item["Key"])[len(prefix) :]
                match = OBJECT_NAME.fullmatch(name)
                if match is None:
                    raise LogVerificationError(
                        f"witness mismatch: object {str(item['Key'])[:120]!r} is not a checkpoint the broker wrote"
                    )
                found.setdefault(int(match.group(1)), set()).add(match.group(2))
    except LogVerificationError:
        raise
    except Exception as exc:
        raise BadInput(f"witness {witness.url}: cannot list it ({type(exc).__name__}: {str(exc)[:200]})") from None
    return {seq: frozenset(hashes) for seq, hashes in found.items()}


def object_lock_enabled(witness: WitnessConfig, *, s3: Any = None) -> bool:
    s3 = s3 if s3 is not None else client(witness)
    answer = s3.get_object_lock_configuration(Bucket=witness.bucket)
    return bool(answer.get("ObjectLockConfiguration", {}).get("ObjectLockEnabled") == "Enabled")
