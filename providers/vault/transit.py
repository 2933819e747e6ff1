"""The broker's issuer key in Vault's transit engine: read, sign with, rotate (``TransitSigning``).

The key never leaves Vault: the broker reads its public keys (``keys/NAME``),
asks it to sign (``sign/NAME``, SHA-256, ECDSA marshalled as JWS wants it,
RSA PKCS#1 v1.5) and to make a new version (``keys/NAME/rotate``). A key
that is missing, of a type that cannot sign, or that the broker's token may
not use is a ``ProviderError`` naming the fix.
"""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta

from broker.vocab.errors import ProviderError
from providers.capabilities import TransitKey
from providers.vault.client import VaultSession

CREATED = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)?")


def read_key(vault: VaultSession, mount: str, name: str) -> TransitKey:
    import hvac.exceptions

    where = f"{mount}/keys/{name}"
    try:
        with vault.errors(f"read {where}"):
            data = vault.client().secrets.transit.read_key(name, mount_point=mount).get("data") or {}
    except ProviderError as exc:
        cause = exc.__cause__
        if isinstance(cause, hvac.exceptions.InvalidPath):
            fix = f"create it: bao write -f {mount}/keys/{name} type=ecdsa-p256"
            message = f"vault {vault.name}: transit key {where} is not there; {fix}"
            raise ProviderError(message, retryable=False) from None
        if isinstance(cause, hvac.exceptions.Forbidden):
            raise ProviderError(
                f"vault {vault.name}: the broker may not read {where}; grant read on it and update on"
                f" {mount}/sign/{name} in the broker's Vault policy",
                retryable=False,
            ) from None
        raise
    versions: dict[int, tuple[str, datetime]] = {}
    for version, entry in (data.get("keys") or {}).items():
        if isinstance(entry, dict) and isinstance(entry.get("public_key"), str):
            created = _created(str(entry.get("creation_time", "")))
            versions[int(version)] = (entry["public_key"], created)
    return TransitKey(name, str(data.get("type", "")), int(data.get("latest_version") or 0), versions)


def sign(vault: VaultSession, mount: str, name: str, version: int, data: bytes, *, rsa: bool) -> bytes:
    import hvac.exceptions

    options = {"signature_algorithm": "pkcs1v15"} if rsa else {"marshaling_algorithm": "jws"}
    try:
        with vault.errors(f"sign with {mount}/keys/{name}"):
            answer = vault.client().secrets.transit.sign_data(
                name,
                hash_input=base64.b64encode(data).decode(),
                key_version=version,
                hash_algorithm="sha2-256",
                mount_point=mount,
                **options,
            )
    except ProviderError as exc:
        if isinstance(exc.__cause__, hvac.exceptions.Forbidden):
            raise ProviderError(
                f"vault {vault.name}: the broker may not sign with {mount}/keys/{name}; grant update on"
                f" {mount}/sign/{name} in the broker's Vault policy",
                retryable=False,
            ) from None
        raise ProviderError(f"{exc.message}; [identity] transit_key must name a key that signs (type ecdsa-p256)",
                            retryable=False) from None  # fmt: skip
    signature = str((answer.get("data") or {}).get("signature", ""))
    prefix, _, encoded = signature.rpartition(":")
    if prefix != f"vault:v{version}" or not encoded:
        raise ProviderError(f"vault {vault.name}: {mount}/sign/{name} answered without a signature", retryable=False)
    padded = encoded + "=" * (-len(encoded) % 4)
    return base64.urlsafe_b64decode(padded) if not rsa else base64.b64decode(padded)


def rotate(vault: VaultSession, mount: str, name: str) -> None:
    with vault.errors(f"rotate {mount}/keys/{name}"):
        vault.client().secrets.transit.rotate_key(name, mount_point=mount)


def _created(text: str) -> datetime:
    """Vault's ``creation_time`` (RFC 3339, nanoseconds): to the second, in UTC; the epoch when unreadable."""
    found = CREATED.match(text)
    if found is None:
        return datetime.fromtimestamp(0, UTC)
    return datetime.strptime(found.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC) - _offset(found.group(2))


def _offset(zone: str) -> timedelta:
    if zone in ("", "Z"):
        return timedelta(0)
    sign = 1 if zone[0] == "+" else -1
    hours, minutes = zone[1:].split(":")
    return sign * timedelta(hours=int(hours), minutes=int(minutes))
