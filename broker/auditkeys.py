"""The audit key file: an HMAC key for secret fingerprints and an Ed25519 checkpoint signing key.

Created (mode 0400) on first use when absent, published atomically (a
complete temporary file hard-linked into place) so concurrent first runs
agree on one key. ``key_id`` names the signing key in every checkpoint, so
a rotated key still verifies the records it signed.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from broker.errors import ConfigError
from broker.secret import Secret
from broker.timeutil import iso, utcnow

KEY_FILE_VERSION = 1


@dataclass(frozen=True)
class RetiredKey:
    """A key generation replaced by ``rotate``: still verifies and looks up what it signed."""

    key_id: str
    public_raw: bytes
    hmac_key: Secret


@dataclass(frozen=True)
class AuditKeys:
    hmac_key: Secret
    signing_key: Secret  # raw 32-byte Ed25519 private key
    key_id: str
    retired: tuple[RetiredKey, ...] = ()

    def public_raw(self) -> bytes:
        return self.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def public_key_lines(self) -> list[str]:
        """Every public key an auditor needs, current first: ``ed25519:<base64>``."""
        raws = [self.public_raw(), *(r.public_raw for r in self.retired)]
        return ["ed25519:" + base64.b64encode(raw).decode() for raw in raws]

    def hmac_keys(self) -> list[Secret]:
        return [self.hmac_key, *(r.hmac_key for r in self.retired)]

    def private_key(self) -> Ed25519PrivateKey:
        return Ed25519PrivateKey.from_private_bytes(self.signing_key.reveal_bytes())

    def public_key(self) -> Ed25519PublicKey:
        return self.private_key().public_key()

    def public_key_text(self) -> str:
        """The public key for auditors: ``ed25519:<base64 raw key>``."""
        raw = self.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return "ed25519:" + base64.b64encode(raw).decode()

    def fingerprint(self, secret: Secret) -> str:
        return secret.fingerprint(self.hmac_key)


def key_id_for(public_raw: bytes) -> str:
    return "ed25519:" + hashlib.sha256(public_raw).hexdigest()[:16]


def load_or_create_keys(path: Path) -> AuditKeys:
    if not os.path.lexists(path):
        _create(path)
    return load_keys(path)


def load_keys(path: Path) -> AuditKeys:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"audit key {path} not found (run broker init)") from None
    except OSError as exc:
        raise ConfigError(f"audit key {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
            raise ConfigError(f"audit key {path} must be a regular file readable only by its owner")
        raw = os.read(fd, 16 * 1024)
    finally:
        os.close(fd)
    try:
        document = json.loads(raw)
        hmac_key = Secret(base64.b64decode(document["hmac_key"], validate=True))
        signing = base64.b64decode(document["signing_key"], validate=True)
        public = Ed25519PrivateKey.from_private_bytes(signing).public_key()
        retired = tuple(
            RetiredKey(
                key_id=key_id_for(base64.b64decode(item["public_key"], validate=True)),
                public_raw=base64.b64decode(item["public_key"], validate=True),
                hmac_key=Secret(base64.b64decode(item["hmac_key"], validate=True)),
            )
            for item in document.get("retired", [])
        )
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"audit key {path} is malformed") from None
    return AuditKeys(
        hmac_key=hmac_key,
        signing_key=Secret(signing),
        key_id=key_id_for(public.public_bytes(Encoding.Raw, PublicFormat.Raw)),
        retired=retired,
    )


def new_key_document(retired: tuple[RetiredKey, ...] = ()) -> bytes:
    private = Ed25519PrivateKey.generate()
    signing = private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    document = {
        "version": KEY_FILE_VERSION,
        "created": iso(utcnow()),
        "hmac_key": base64.b64encode(secrets.token_bytes(32)).decode(),
        "signing_key": base64.b64encode(signing).decode(),
        "retired": [
            {
                "public_key": base64.b64encode(r.public_raw).decode(),
                "hmac_key": base64.b64encode(r.hmac_key.reveal_bytes()).decode(),
            }
            for r in retired
        ],
    }
    return json.dumps(document, indent=1).encode() + b"\n"


def rotate_keys(path: Path) -> AuditKeys:
    """Replace the signing and HMAC keys; the old ones stay as retired keys for verification and lookup."""
    current = load_keys(path)
    retired = (RetiredKey(current.key_id, current.public_raw(), current.hmac_key), *current.retired)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o400)
    try:
        os.write(fd, new_key_document(retired))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temporary, path)
    return load_keys(path)


def _create(path: Path) -> None:
    try:
        os.makedirs(path.parent, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {path.parent}: {exc.strerror}") from None
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o400)
    try:
        os.write(fd, new_key_document())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass  # another broker created it first; use theirs
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
