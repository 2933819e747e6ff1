"""The issuance log in process: hash chain, signed checkpoints, the audit key's file, a torn last record, and
fingerprints that are keyed and never the secret.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import threading
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from broker.audit.keys import load_or_create_keys
from broker.audit.log import Entry, IssuanceLog, checkpoint_message
from broker.vocab.errors import ConfigError, LogVerificationError
from broker.vocab.secret import Secret
from tests.fixtures.logchain import assert_chain


def test_records_chain_and_checkpoints_verify_with_the_public_key(tmp_path: Path) -> None:
    keys = load_or_create_keys(tmp_path / "audit.key", tmp_path / "fingerprint.key")
    log = IssuanceLog(tmp_path, keys)
    log.append("session.denied", session=None, task="t", requester="ci", reasons=["x"])
    log.append("session.issued", session="s-1", task="t", requester="ci")
    checkpoint = log.checkpoint("ci")
    assert checkpoint is not None and log.checkpoint("ci") is None  # nothing new to sign
    items = assert_chain(tmp_path / "issuance.jsonl")
    assert [r["event"] for r in items] == ["session.denied", "session.issued", "checkpoint"]
    for field in ("seq", "time", "event", "session", "task", "requester", "prev", "hash"):
        assert field in items[0]
    assert str(items[0]["time"]).endswith("Z")
    public_raw = base64.b64decode(keys.public_key_lines()[0].removeprefix("ed25519:"))
    public = Ed25519PublicKey.from_public_bytes(public_raw)
    public.verify(base64.b64decode(str(checkpoint["signature"])), checkpoint_message(2, str(items[1]["hash"])))
    assert checkpoint["key_id"] == keys.key_id


def test_audit_key_file_is_created_once_with_mode_0400(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "audit.key"
    fingerprint = tmp_path / "keys" / "fingerprint.key"
    first = load_or_create_keys(path, fingerprint)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o400
    assert stat.S_IMODE(os.stat(fingerprint).st_mode) == 0o400
    again = load_or_create_keys(path, fingerprint)
    assert (again.key_id, again.fingerprints.key_id) == (first.key_id, first.fingerprints.key_id)
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="readable only by its owner"):
        load_or_create_keys(path, fingerprint)


def test_a_torn_last_record_stops_appends(tmp_path: Path) -> None:
    log = IssuanceLog(tmp_path, load_or_create_keys(tmp_path / "audit.key", tmp_path / "fingerprint.key"))
    log.append("session.issued", session="s-1", task="t", requester="ci")
    with open(tmp_path / "issuance.jsonl", "ab") as handle:
        handle.write(b'{"seq": 2, "ev')
    with pytest.raises(LogVerificationError, match="torn record"):
        log.append("session.issued", session="s-2", task="t", requester="ci")


def test_fingerprint_is_keyed_and_never_the_secret(tmp_path: Path) -> None:
    keys = load_or_create_keys(tmp_path / "audit.key", tmp_path / "fingerprint.key")
    secret = Secret("s.canary-token-value")
    fingerprint = keys.fingerprint(secret)
    assert fingerprint.startswith("hmac-sha256:") and "canary" not in fingerprint
    assert fingerprint != "hmac-sha256:" + hashlib.sha256(b"s.canary-token-value").hexdigest()
    other = load_or_create_keys(tmp_path / "other.key", tmp_path / "other-fingerprint.key")
    assert other.fingerprint(secret) != fingerprint


def test_a_write_the_disk_cannot_take_whole_leaves_no_torn_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk takes part of an append, then ENOSPC: the part is cut off again, so the log still takes records
    (a torn record would stop every append until ``audit verify --repair``)."""
    import errno

    from broker.audit.log import Entry
    from broker.vocab.errors import StoreError

    keys = load_or_create_keys(tmp_path / "audit.key", tmp_path / "fingerprint.key")
    log = IssuanceLog(tmp_path, keys)
    log.append("session.issued", session="s-1", task="t", requester="ci")
    before = log.path.read_bytes()
    real_write = os.write

    def full_disk(fd: int, data: bytes) -> int:
        if os.path.samestat(os.fstat(fd), os.stat(log.path)) and len(data) > 100:  # takes 100 bytes, then is full
            real_write(fd, data[:100])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(StoreError, match="No space left on device; the records were not written"):
        log.append_many([Entry("egress.request", "s-1", "t", "ci", {"path": f"/{n}"}) for n in range(5)])
    assert log.path.read_bytes() == before
    monkeypatch.setattr(os, "write", real_write)
    log.append("session.revoked", session="s-1", task="t", requester="ci")
    assert [r["event"] for r in assert_chain(log.path)] == ["session.issued", "session.revoked"]


def test_a_write_under_way_is_never_taken_for_a_torn_record(
    tmp_path: Path,
) -> None:
    """A new issue checks that the log can take records (``head``) while the daemon's other threads, or other
    processes, append: half a write it happens to see is read again under the lock, never taken for a torn record."""
    log = IssuanceLog(tmp_path, load_or_create_keys(tmp_path / "audit.key", tmp_path / "fingerprint.key"))
    log.append("session.issued", session=None, task=None, requester="uid:0")
    big = [Entry("egress.request", None, None, "uid:0", {"pad": "x" * 200_000}) for _ in range(8)]
    stop = threading.Event()
    seen: list[BaseException] = []

    def appending() -> None:
        while not stop.is_set():
            log.append_many(big)

    writer = threading.Thread(target=appending)
    writer.start()
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline and not seen:
            try:
                log.head()
            except LogVerificationError as exc:
                seen.append(exc)
    finally:
        stop.set()
        writer.join()
    assert seen == []
