"""``[identity]``: the broker as an OpenID Connect issuer, as the config declares it.

``issuer`` alone makes the broker an issuer: an https URL (plain http only to
loopback, for a local stack), no user, query or fragment. Its key is a file
(``signing_key_file``, created 0600 on first use; ``algorithm`` ES256 or
RS256) or a Vault transit key (``transit_key``, at ``transit_mount`` of the
vault instance ``transit_vault``: it never leaves Vault). The loader checks
the shape here; ``broker.core.inputs.config`` checks what it names among the
provider instances, and ``broker.core.identity`` signs with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from broker.vocab.errors import ConfigError
from broker.vocab.fields import Fields, shown
from providers.urls import is_loopback_host

ALGORITHMS = ("ES256", "RS256")
DEFAULT_ALGORITHM = "ES256"
DEFAULT_TRANSIT_MOUNT = "transit"
DEFAULT_KEY_NAME = "identity.key"  # beside audit_key
KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
MOUNT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_/-]{0,127}")


@dataclass(frozen=True)
class IdentityConfig:
    """``[identity]``: the issuer URL and where its signing key lives."""

    issuer: str
    signing_key_file: Path
    algorithm: str = DEFAULT_ALGORITHM
    transit_key: str | None = None  # the key's name in Vault's transit engine; None: the file key
    transit_vault: str | None = None  # the vault provider instance that signs with it
    transit_mount: str = DEFAULT_TRANSIT_MOUNT


def parse_identity(table: Fields, base: Path, audit_key: Path) -> IdentityConfig:
    """The ``[identity]`` table; the transit instance is checked by the caller, once the providers are built."""
    issuer = issuer_url(table.req_string("issuer", max_len=512), table.where("issuer"))
    key_file = table.string("signing_key_file", required=False, max_len=4096)
    algorithm = table.string("algorithm", required=False, max_len=8)
    transit_key = table.string("transit_key", required=False, pattern=KEY_NAME, max_len=128, hint="a key name")
    transit_vault = table.string("transit_vault", required=False, max_len=32)
    mount = table.string("transit_mount", required=False, pattern=MOUNT, max_len=128, hint="a mount path")
    table.done()
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise table.fail("algorithm", f"must be one of {', '.join(ALGORITHMS)}")
    if transit_key is None:
        for key, value in (("transit_vault", transit_vault), ("transit_mount", mount)):
            if value is not None:
                raise table.fail(key, "only with transit_key")
    elif key_file is not None or algorithm is not None:
        key = "signing_key_file" if key_file is not None else "algorithm"
        raise table.fail(key, "not with transit_key: the transit key signs, and its type sets the algorithm")
    path = Path(key_file) if key_file else audit_key.parent / DEFAULT_KEY_NAME
    return IdentityConfig(
        issuer=issuer,
        signing_key_file=path if path.is_absolute() else base / path,
        algorithm=algorithm or DEFAULT_ALGORITHM,
        transit_key=transit_key,
        transit_vault=transit_vault,
        transit_mount=(mount or DEFAULT_TRANSIT_MOUNT).strip("/"),
    )


def issuer_url(value: str, where: str) -> str:
    """``value`` as an issuer (``iss``): https, or http to loopback; no user, query or fragment; no trailing ``/``."""
    try:
        url = urlsplit(value)
        host = url.hostname or ""
        url.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        raise ConfigError(f"{where}: {shown(value, 80)} is not a URL (https://broker.example.com)") from None
    if url.scheme not in ("https", "http") or not host:
        raise ConfigError(f"{where}: {shown(value, 80)} is not an https URL (https://broker.example.com)")
    if url.scheme == "http" and not is_loopback_host(host):
        raise ConfigError(
            f"{where}: {shown(value, 80)} is not https; verifiers fetch the issuer's keys from it, so use"
            " https://... (plain http only for 127.0.0.0/8, ::1 or localhost)"
        )
    if url.username is not None or url.password is not None or url.query or url.fragment or "#" in value:
        raise ConfigError(f"{where}: {shown(value, 80)} must be scheme://host[:port][/path], nothing more")
    return value.rstrip("/")
