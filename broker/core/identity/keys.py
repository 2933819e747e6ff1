"""The issuer's key in a file (``[identity] signing_key_file``): made on first use, rotated with an overlap.

The file (JSON, mode 0600, written only through the one private-file
writer) holds the current private key (PKCS#8 PEM, ES256 or RS256) and the
public keys of the retired ones, each with the time until which a token it
signed may still be alive (``until``: its retirement plus the longest a token
lives). A first use creates it, published by a hard link so that two
processes starting at once agree on one key; ``rotate`` writes a new key
under a lock, so two rotations never lose a key either. Every use looks at
the file's identity first (one ``stat``), so a rotation by ``broker identity
rotate-key`` reaches a running daemon at its next token. A key's id
(``kid``) is derived from its public key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from broker.vocab.errors import ConfigError
from broker.vocab.files import FileTooLarge, NotRegularFile, read_bounded, write_private_file
from broker.vocab.time import iso, parse_iso, utcnow
from providers.capabilities import MAX_TOKEN_LIFETIME

FILE_VERSION = 1
MAX_FILE_BYTES = 256 * 1024
#: A retired key stays published this long past the longest token it may have signed (clocks differ a little).
LEEWAY = 60
LOCK_WAIT = 30.0


def key_id(public_key: Any) -> str:
    """A key's id: a digest of its public key (SubjectPublicKeyInfo), the same on every host that holds it."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    der = public_key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return base64.urlsafe_b64encode(hashlib.sha256(der).digest()[:15]).decode()


def public_jwk(public_key: Any, algorithm: str) -> dict[str, Any]:
    """The JSON Web Key of a public key (pyjwt's), with its id, algorithm and use."""
    from jwt.algorithms import ECAlgorithm, RSAAlgorithm

    jwk: dict[str, Any] = (ECAlgorithm if algorithm == "ES256" else RSAAlgorithm).to_jwk(public_key, as_dict=True)
    return {**jwk, "kid": key_id(public_key), "alg": algorithm, "use": "sig"}


def generate(algorithm: str) -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if algorithm == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass(frozen=True)
class Retired:
    jwk: dict[str, Any]
    until: datetime


@dataclass(frozen=True)
class FileKey:
    """What the file holds, read: the current key (its id and algorithm) and the retired public keys."""

    private_key: Any
    algorithm: str
    kid: str
    retired: tuple[Retired, ...]

    def jwks(self, now: datetime) -> list[dict[str, Any]]:
        current = public_jwk(self.private_key.public_key(), self.algorithm)
        return [current, *(item.jwk for item in self.retired if item.until > now)]


class FileKeyRing:
    """The issuer's key in ``path`` (see the module docstring); ``algorithm`` is what a new key is made with."""

    def __init__(self, path: Path, algorithm: str) -> None:
        self.path = path
        self.algorithm = algorithm
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._key: FileKey | None = None

    def current(self) -> FileKey:
        """The key as the file holds it now (made when there is none)."""
        with self._lock:
            try:
                info = os.lstat(self.path)
            except FileNotFoundError:
                self._create()
                info = os.lstat(self.path)
            except OSError as exc:
                raise ConfigError(f"identity.signing_key_file {self.path}: {exc.strerror}") from None
            seen = (info.st_ino, info.st_mtime_ns, info.st_size)
            if self._key is None or seen != self._seen:
                self._key, self._seen = self._read(), seen
            return self._key

    def jwks(self, now: datetime) -> list[dict[str, Any]]:
        """The current key's public key, then each retired one whose tokens may still be alive."""
        return self.current().jwks(now)

    def rotate(self, now: datetime) -> tuple[str, str]:
        """A new key signs from now on; the old one's public key stays until its last token ends. (old, new) ids."""
        from filelock import FileLock, Timeout

        self.current()  # made first if there is none
        lock = FileLock(str(self.path.parent / f".{self.path.name}.lock"), timeout=LOCK_WAIT)
        try:
            with lock:
                old = self._read()
                until = now + timedelta(seconds=MAX_TOKEN_LIFETIME + LEEWAY)
                retired = (
                    Retired(public_jwk(old.private_key.public_key(), old.algorithm), until),
                    *(item for item in old.retired if item.until > now),
                )
                new = generate(self.algorithm)
                self._publish(_document(new, self.algorithm, retired, now), replace=True)
        except Timeout:
            raise ConfigError(f"identity.signing_key_file {self.path} is being rotated by another process") from None
        with self._lock:
            self._key = None
        return old.kid, self.current().kid

    def _create(self) -> None:
        key = generate(self.algorithm)
        self._publish(_document(key, self.algorithm, (), utcnow()), replace=False)  # another's first key wins

    def _publish(self, data: bytes, *, replace: bool) -> None:
        try:
            os.makedirs(self.path.parent, mode=0o700, exist_ok=True)
            write_private_file(self.path.parent, self.path.name, data, mode=0o600, durable=True, replace=replace)
        except OSError as exc:
            raise ConfigError(f"identity.signing_key_file: cannot write {self.path}: {exc.strerror}") from None

    def _read(self) -> FileKey:
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        what = f"identity.signing_key_file {self.path}"
        try:
            raw, info = read_bounded(self.path, MAX_FILE_BYTES, follow_symlinks=False)
        except (NotRegularFile, FileTooLarge, OSError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a regular key file"
            raise ConfigError(f"{what}: {reason}") from None
        if info.st_mode & 0o077:
            raise ConfigError(f"{what} is readable by others (mode {info.st_mode & 0o777:04o}); chmod 600 it")
        try:
            document = json.loads(raw)
            algorithm = document["algorithm"]
            key = load_pem_private_key(document["private_key"].encode(), password=None)
            wanted = ec.EllipticCurvePrivateKey if algorithm == "ES256" else rsa.RSAPrivateKey
            if algorithm not in ("ES256", "RS256") or not isinstance(key, wanted):
                raise ValueError(algorithm)
            retired = tuple(Retired(dict(item["jwk"]), parse_iso(item["until"])) for item in document["retired"])
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ConfigError(f"{what} is malformed; restore it from a backup") from None
        return FileKey(key, algorithm, key_id(key.public_key()), retired)


def _document(key: Any, algorithm: str, retired: tuple[Retired, ...], now: datetime) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    document = {
        "version": FILE_VERSION,
        "created": iso(now),
        "algorithm": algorithm,
        "private_key": pem,
        "retired": [{"jwk": item.jwk, "until": iso(item.until)} for item in retired],
    }
    return json.dumps(document, indent=1).encode() + b"\n"
