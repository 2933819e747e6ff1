"""Secrets kept in Vault's KV v2 for another instance of the config (``KeepsSecrets``): read, and written back.

An OAuth refresh token rotates at each use: its ``oauth`` instance reads it
here and writes its successor back. The write keeps the secret's other
fields and is a check-and-set on the version read (``cas``), so a value the
operator wrote in between is never overwritten: that write is refused and
the operator's stays. The broker's own Vault login needs ``read`` on
``MOUNT/data/PATH`` and ``create``/``update`` there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.vocab.errors import ProviderError
from broker.vocab.secret import Secret
from providers.capabilities import KeptSecret

if TYPE_CHECKING:
    from providers.vault.leases import Engines

MAX_KEPT = 8192


def _read(engines: Engines, path: str) -> tuple[dict[str, Any], int]:
    mount = engines.mounts["secret"]
    with engines.vault.errors(f"read {mount}/data/{path}"):
        response = engines.vault.client().secrets.kv.v2.read_secret_version(
            path=path, mount_point=mount, raise_on_deleted_version=True
        )
    data = (response or {}).get("data") or {}
    version = (data.get("metadata") or {}).get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ProviderError(f"vault {engines.name}: {mount}/{path} has no version", retryable=False)
    return dict(data.get("data") or {}), version


def read_kept(engines: Engines, path: str, field: str) -> KeptSecret:
    values, version = _read(engines, path)
    value = values.get(field)
    where = f"vault {engines.name}: {engines.mounts['secret']}/{path}"
    if not isinstance(value, str) or not value.strip():
        raise ProviderError(f"{where} has no text field {field!r}", retryable=False)
    value = value.strip()
    if len(value) > MAX_KEPT or not value.isprintable() or any(c.isspace() for c in value):
        raise ProviderError(f"{where}: field {field!r} is not one line of printable text", retryable=False)
    return KeptSecret(Secret(value), version)


def write_kept(engines: Engines, path: str, field: str, value: Secret, version: int) -> bool:
    import hvac.exceptions

    values, current = _read(engines, path)
    if current != version:
        return False
    mount = engines.mounts["secret"]
    try:
        with engines.vault.errors(f"write {mount}/data/{path}"):
            engines.vault.client().secrets.kv.v2.create_or_update_secret(
                path=path, secret={**values, field: value.reveal()}, cas=version, mount_point=mount
            )
    except ProviderError as exc:
        if isinstance(exc.__cause__, hvac.exceptions.InvalidRequest) and "check-and-set" in str(exc.__cause__):
            return False  # written in between: theirs stays
        raise
    return True
