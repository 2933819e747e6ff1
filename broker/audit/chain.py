"""Checking the chain alone, fast on a log checked before, and cutting a torn last record.

``broker audit list``/``lookup`` check the hash chain before reading (without
keys: checkpoints are ``verify``'s job); the prefix checked last time is only
rehashed. ``repair_torn_tail`` removes a record a crash left half-written.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from broker.audit.log import open_for_reading
from broker.audit.verify import Resume, VerifyResult, verify_log


@dataclass(frozen=True)
class CheckedPrefix:
    """A prefix of a log whose chain was checked: its length, last record and SHA-256 of its bytes."""

    offset: int
    seq: int
    hash: str
    digest: str
    fingerprint_key_ids: frozenset[str]


def prefix_hasher(path: Path, length: int) -> Any:
    """A SHA-256 object fed the first ``length`` bytes; None when the file is shorter."""
    digest = hashlib.sha256()
    with open_for_reading(path) as handle:
        if os.fstat(handle.fileno()).st_size < length:
            return None
        remaining = length
        while remaining:
            chunk = handle.read(min(remaining, 8 << 20))
            if not chunk:
                return None
            digest.update(chunk)
            remaining -= len(chunk)
    return digest


def check_chain(path: Path, known: CheckedPrefix | None) -> tuple[VerifyResult, CheckedPrefix | None]:
    """The chain check of ``audit lookup``/``active``: only the part after a prefix checked before.

    The prefix counts only when its bytes still hash to what they did (a
    SHA-256 pass, far cheaper than parsing every record), so an edit inside
    it is found by the full check that follows.
    """
    resume, hasher = None, hashlib.sha256()
    if known is not None and known.offset:
        prefix = prefix_hasher(path, known.offset)
        if prefix is not None and prefix.hexdigest() == known.digest:
            resume, hasher = Resume(known.offset, known.seq, known.hash), prefix
    result = verify_log(path, None, resume=resume, hasher=hasher)
    ids = result.fingerprint_key_ids | (known.fingerprint_key_ids if resume and known else frozenset())
    result = replace(result, fingerprint_key_ids=ids)
    if result.last is None:
        return result, None
    return result, CheckedPrefix(result.bytes_checked, result.last.seq, result.last.hash, hasher.hexdigest(), ids)


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
