"""``Secret``: the one type secret material travels in.

Its ``repr``, ``str`` and ``format`` are redacted, it refuses to be pickled,
and the value is only reachable through ``reveal()``, so a secret that slips
into a log line, an exception or a traceback prints as ``Secret(***)``.
``read_secret_file`` reads the broker's own secret files into one (through
the one bounded reader, ``broker.vocab.files``).

``AwsKeys`` is the one secret that is not one ``Secret``: an AWS access key
id (not secret) with its secret key and session token. The aws provider
mints them and hands them to the core for an ``inject: proxy`` credential
(``providers.base.ProxiedCredential``: the real keys and the placeholder
keys its files hold); the proxy's re-signer signs with them
(``broker.egress.injectors.sigv4``).
"""

from __future__ import annotations

import hashlib
import hmac
import stat
from typing import TYPE_CHECKING, NamedTuple, NoReturn

from broker.vocab.errors import ConfigError
from broker.vocab.files import read_regular_file

if TYPE_CHECKING:
    from pathlib import Path

REDACTED = "Secret(***)"


class Secret:
    """An opaque secret value (a token, a key, a password)."""

    __slots__ = ("_value",)
    _value: bytes

    def __init__(self, value: str | bytes) -> None:
        if isinstance(value, str):
            value = value.encode("utf-8")
        if not isinstance(value, bytes):
            raise TypeError("Secret takes str or bytes")
        object.__setattr__(self, "_value", value)

    def reveal(self) -> str:
        """The secret as text, for the one call that needs it."""
        return self._value.decode("utf-8")

    def reveal_bytes(self) -> bytes:
        return self._value

    def fingerprint(self, key: Secret) -> str:
        """``hmac-sha256:<hex>`` of the secret under ``key`` (the audit HMAC key)."""
        digest = hmac.new(key.reveal_bytes(), self._value, hashlib.sha256).hexdigest()
        return f"hmac-sha256:{digest}"

    def __repr__(self) -> str:
        return REDACTED

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return REDACTED

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value, other._value)

    def __hash__(self) -> int:
        return hash(hashlib.sha256(self._value).digest())

    def __len__(self) -> int:
        return len(self._value)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("Secret is immutable")

    def __reduce__(self) -> NoReturn:
        raise TypeError("Secret cannot be pickled")

    def __getstate__(self) -> NoReturn:
        raise TypeError("Secret cannot be pickled")


MAX_SECRET_FILE_BYTES = 64 * 1024


def read_secret_file(path: Path, what: str, *, strip: bool = True) -> Secret:
    """A broker secret file (provider token, private key): regular, not a link, owner-only, small, not empty."""
    data, info = read_regular_file(
        path, what=what, max_bytes=MAX_SECRET_FILE_BYTES, error=ConfigError, follow_symlinks=False
    )
    if info.st_mode & 0o077:
        raise ConfigError(f"{what} {path} is readable by others (mode {stat.S_IMODE(info.st_mode):04o}); chmod 600 it")
    if strip:
        data = data.strip()
    if not data:
        raise ConfigError(f"{what} {path} is empty")
    return Secret(data)


class AwsKeys(NamedTuple):
    """One set of AWS credentials: the placeholder the sandbox holds, or the real STS keys behind it. A named tuple,
    not a dataclass: this module is on the thin client's cold path, which does not load ``dataclasses``."""

    access_key_id: str
    secret_access_key: Secret
    session_token: Secret | None = None
