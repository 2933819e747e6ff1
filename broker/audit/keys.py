"""The two audit keys, each in its own file: the Ed25519 checkpoint signing key and the HMAC fingerprint key.

``audit_key`` signs checkpoints; ``fingerprint_key`` fingerprints secrets and
is all ``audit lookup`` needs, so whoever may look up a leaked secret cannot
forge a checkpoint. Each file is created (mode 0400) on first use when absent,
published atomically (a complete temporary file hard-linked into place) so
concurrent first runs agree on one key. Each key has an id (``key_id``, and
``fingerprint_key_id`` in every ``credential.issued`` record), and a rotated
key stays in its file as a retired key, so older checkpoints still verify and
older fingerprints are still found. An older installation kept both keys in
``audit_key``; ``migrate_key_file`` splits it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from broker.vocab.errors import ConfigError
from broker.vocab.files import FileTooLarge, NotRegularFile, read_bounded, write_private_file
from broker.vocab.secret import Secret
from broker.vocab.time import iso, utcnow

SIGNING_FILE_VERSION = 2
FINGERPRINT_FILE_VERSION = 1
MAX_KEY_FILE_BYTES = 64 * 1024
MIGRATE_HINT = "split it with: broker audit migrate-keys"


def key_id_for(public_raw: bytes) -> str:
    return "ed25519:" + hashlib.sha256(public_raw).hexdigest()[:16]


def fingerprint_key_id_for(hmac_key: Secret) -> str:
    """A name for an HMAC key that reveals nothing of it (a domain-separated hash)."""
    return "hmac-sha256:" + hashlib.sha256(b"broker-fingerprint-key-id:v1:" + hmac_key.reveal_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class SigningKeys:
    """``audit_key``: the current Ed25519 signing key and the public halves of retired ones."""

    signing_key: Secret  # raw 32-byte Ed25519 private key
    key_id: str
    retired: tuple[bytes, ...] = ()  # raw public keys, newest first

    def private_key(self) -> Ed25519PrivateKey:
        return Ed25519PrivateKey.from_private_bytes(self.signing_key.reveal_bytes())

    def public_key(self) -> Ed25519PublicKey:
        return self.private_key().public_key()

    def public_raw(self) -> bytes:
        return self.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def public_key_lines(self) -> list[str]:
        """Every public key an auditor needs, current first: ``ed25519:<base64>``."""
        return ["ed25519:" + base64.b64encode(raw).decode() for raw in (self.public_raw(), *self.retired)]


@dataclass(frozen=True)
class FingerprintKeys:
    """``fingerprint_key``: the current HMAC key and retired ones (lookups still find what they made)."""

    hmac_key: Secret
    key_id: str
    retired: tuple[Secret, ...] = ()

    def fingerprint(self, secret: Secret) -> str:
        return secret.fingerprint(self.hmac_key)

    def hmac_keys(self) -> list[Secret]:
        return [self.hmac_key, *self.retired]

    def key_ids(self) -> set[str]:
        return {fingerprint_key_id_for(key) for key in self.hmac_keys()}


@dataclass(frozen=True)
class AuditKeys:
    """What a command that writes the log needs: both keys."""

    signing: SigningKeys
    fingerprints: FingerprintKeys

    @property
    def key_id(self) -> str:
        return self.signing.key_id

    def private_key(self) -> Ed25519PrivateKey:
        return self.signing.private_key()

    def public_key_lines(self) -> list[str]:
        return self.signing.public_key_lines()

    def fingerprint(self, secret: Secret) -> str:
        return self.fingerprints.fingerprint(secret)


def load_or_create_keys(audit_key: Path, fingerprint_key: Path) -> AuditKeys:
    if not os.path.lexists(audit_key):
        _publish(audit_key, _signing_document(_new_signing_raw(), ()), replace=False)
    signing = load_signing_keys(audit_key)  # first: a one-file layout must not get a fresh fingerprint key
    if not os.path.lexists(fingerprint_key):
        _publish(fingerprint_key, _fingerprint_document(Secret(secrets.token_bytes(32)), ()), replace=False)
    return AuditKeys(signing, load_fingerprint_keys(fingerprint_key))


def load_signing_keys(path: Path) -> SigningKeys:
    document = _read(path, "audit key")
    if "hmac_key" in document:
        raise ConfigError(
            f"audit key {path} also holds the fingerprint key (the older one-file layout); {MIGRATE_HINT}"
        )
    try:
        signing = base64.b64decode(document["signing_key"], validate=True)
        public = Ed25519PrivateKey.from_private_bytes(signing).public_key()
        retired = tuple(base64.b64decode(item, validate=True) for item in document.get("retired_public_keys", []))
        for raw in retired:
            Ed25519PublicKey.from_public_bytes(raw)
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"audit key {path} is malformed") from None
    return SigningKeys(Secret(signing), key_id_for(public.public_bytes(Encoding.Raw, PublicFormat.Raw)), retired)


def load_fingerprint_keys(path: Path) -> FingerprintKeys:
    document = _read(path, "fingerprint key")
    if "signing_key" in document:
        raise ConfigError(f"fingerprint key {path} holds a signing key: it must be a file of its own")
    try:
        current = Secret(base64.b64decode(document["hmac_key"], validate=True))
        retired = tuple(Secret(base64.b64decode(item, validate=True)) for item in document.get("retired", []))
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"fingerprint key {path} is malformed") from None
    return FingerprintKeys(current, fingerprint_key_id_for(current), retired)


def rotate_signing_key(path: Path) -> SigningKeys:
    """A new signing key; the old public key stays so the checkpoints it signed still verify."""
    current = load_signing_keys(path)
    _publish(path, _signing_document(_new_signing_raw(), (current.public_raw(), *current.retired)), replace=True)
    return load_signing_keys(path)


def rotate_fingerprint_key(path: Path) -> FingerprintKeys:
    """A new HMAC key; the old one stays so lookups still find the fingerprints it made."""
    current = load_fingerprint_keys(path)
    new = Secret(secrets.token_bytes(32))
    _publish(path, _fingerprint_document(new, tuple(current.hmac_keys())), replace=True)
    return load_fingerprint_keys(path)


@dataclass(frozen=True)
class Migration:
    signing_key_id: str
    fingerprint_key_id: str
    retired: int


def migrate_key_file(audit_key: Path, fingerprint_key: Path) -> Migration | None:
    """Split a one-file ``audit_key`` (signing + HMAC keys) into two files; None when already split.

    The fingerprint file is written first, then the signing file is replaced
    without its HMAC keys, so a crash in between leaves a state this function
    finishes when run again.
    """
    document = _read(audit_key, "audit key")
    if "hmac_key" not in document:
        return None
    try:
        hmac_key = Secret(base64.b64decode(document["hmac_key"], validate=True))
        signing = base64.b64decode(document["signing_key"], validate=True)
        retired = document.get("retired", [])
        retired_hmac = tuple(Secret(base64.b64decode(item["hmac_key"], validate=True)) for item in retired)
        retired_public = tuple(base64.b64decode(item["public_key"], validate=True) for item in retired)
        Ed25519PrivateKey.from_private_bytes(signing)
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"audit key {audit_key} is malformed") from None
    wanted = FingerprintKeys(hmac_key, fingerprint_key_id_for(hmac_key), retired_hmac)
    if os.path.lexists(fingerprint_key):
        existing = load_fingerprint_keys(fingerprint_key)
        if existing.hmac_keys() != wanted.hmac_keys():
            raise ConfigError(
                f"fingerprint key {fingerprint_key} exists and holds other keys than {audit_key}; move it away first"
            )
    else:
        _publish(fingerprint_key, _fingerprint_document(hmac_key, retired_hmac), replace=False)
    _publish(audit_key, _signing_document(signing, retired_public), replace=True)
    signing_keys = load_signing_keys(audit_key)
    return Migration(signing_keys.key_id, wanted.key_id, len(retired))


def _new_signing_raw() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def _signing_document(signing_raw: bytes, retired_public: tuple[bytes, ...]) -> bytes:
    document = {
        "version": SIGNING_FILE_VERSION,
        "created": iso(utcnow()),
        "signing_key": base64.b64encode(signing_raw).decode(),
        "retired_public_keys": [base64.b64encode(raw).decode() for raw in retired_public],
    }
    return json.dumps(document, indent=1).encode() + b"\n"


def _fingerprint_document(current: Secret, retired: tuple[Secret, ...]) -> bytes:
    document = {
        "version": FINGERPRINT_FILE_VERSION,
        "created": iso(utcnow()),
        "hmac_key": base64.b64encode(current.reveal_bytes()).decode(),
        "retired": [base64.b64encode(key.reveal_bytes()).decode() for key in retired],
    }
    return json.dumps(document, indent=1).encode() + b"\n"


def _read(path: Path, what: str) -> dict[str, Any]:
    try:
        raw, info = read_bounded(path, MAX_KEY_FILE_BYTES, follow_symlinks=False)
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} not found (run broker init)") from None
    except NotRegularFile:
        raise ConfigError(f"{what} {path} must be a regular file readable only by its owner") from None
    except FileTooLarge:
        raise ConfigError(f"{what} {path} is malformed") from None
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror}") from None
    if info.st_mode & 0o077:
        raise ConfigError(f"{what} {path} must be a regular file readable only by its owner")
    try:
        document = json.loads(raw)
    except ValueError:
        raise ConfigError(f"{what} {path} is malformed") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{what} {path} is malformed")
    return document


def _publish(path: Path, data: bytes, *, replace: bool) -> None:
    """Write a complete 0400 file next to ``path``, then link it into place (or rename over it)."""
    try:
        os.makedirs(path.parent, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {path.parent}: {exc.strerror}") from None
    try:
        write_private_file(path.parent, path.name, data, mode=0o400, durable=True, replace=replace)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None
