"""An ``oauth`` instance's configuration, read strictly: where the authorisation server is, who the broker is
there, and what it was given to get access tokens with.

One of three grants (``grant``): ``refresh_token`` (the default: the
operator's refresh token, kept in a 0600 file or a field of Vault's KV v2
through a ``vault`` instance of the config), ``client_credentials`` (the
client's own secret) or ``jwt_bearer`` (RFC 7523: an assertion the broker
signs with the operator's key). Keys of another grant are refused by name,
so a table never says more than the broker uses. Every URL is ``https://``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from broker.vocab.errors import ConfigError
from broker.vocab.fields import Fields, shown

URL = re.compile(r"https://[\x21-\x7e]{1,2000}")
CLIENT_ID = re.compile(r"[\x21-\x7e]{1,255}")
INSTANCE = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
#: A KV path (as ``kind: secret`` reads them) and a field name.
KV_PATH = re.compile(r"(?!.*(^|/)\.\.?(/|$))[A-Za-z0-9_.-]{1,128}(/[A-Za-z0-9_.-]{1,128}){0,15}")
KV_FIELD = re.compile(r"[A-Za-z0-9_.-]{1,128}")
CLAIM = re.compile(r"[\x20-\x7e]{1,512}")
KEY_ID = re.compile(r"[\x21-\x7e]{1,128}")
ALGORITHMS = ("RS256", "PS256", "ES256", "EdDSA")


class GrantKind(enum.StrEnum):
    REFRESH_TOKEN = "refresh_token"  # noqa: S105  (a grant type's name)
    CLIENT_CREDENTIALS = "client_credentials"
    JWT_BEARER = "jwt_bearer"


@dataclass(frozen=True)
class VaultPlace:
    """A field of a KV v2 secret at a ``vault`` instance of the config (its ``secret_mount``)."""

    instance: str
    path: str
    field: str

    def __str__(self) -> str:
        return f"vault {self.instance}: {self.path} field {self.field}"


@dataclass(frozen=True)
class Assertion:
    """RFC 7523: the claims of the JWT the broker signs, and the key it signs with."""

    key_file: Path
    algorithm: str
    issuer: str
    subject: str
    audience: str
    key_id: str | None = None


@dataclass(frozen=True)
class OAuthSettings:
    token_url: str
    client_id: str
    grant: GrantKind
    proxy_hosts: tuple[str, ...]
    revocation_url: str | None = None
    introspection_url: str | None = None
    client_secret_file: Path | None = None
    refresh_token_file: Path | None = None
    refresh_token_vault: VaultPlace | None = None
    assertion: Assertion | None = None
    ca_file: Path | None = None
    timeout: int = 10

    @property
    def host(self) -> str:
        """The authorisation server's host, as messages name it."""
        return urlsplit(self.token_url).netloc


def _url(fields: Fields, key: str, *, required: bool = False) -> str | None:
    value = fields.string(key, required=required, max_len=2048)
    if value is None:
        return None
    parts = urlsplit(value) if URL.fullmatch(value) else None
    if parts is None or not parts.hostname or parts.fragment or parts.username or parts.password:
        raise fields.fail(key, f"{shown(value)} is not an https:// URL (no user, no fragment)")
    return value


def read_settings(name: str, fields: Fields, config_dir: Path) -> OAuthSettings:
    """The instance's table (its ``type``, ``proxy_hosts`` and ``upstream_ca_file`` are the core's)."""
    token_url = _url(fields, "token_url", required=True)
    assert token_url is not None
    hosts = fields.string_list("proxy_hosts", required=False, max_items=16)
    if not hosts:
        raise fields.fail("proxy_hosts", "required: an OAuth token goes only by the proxy, to these hosts")
    grant_name = fields.string("grant", required=False, max_len=32) or GrantKind.REFRESH_TOKEN.value
    if grant_name not in tuple(GrantKind):
        raise fields.fail("grant", f"{shown(grant_name)}: one of {', '.join(GrantKind)}")
    grant = GrantKind(grant_name)

    def path(key: str) -> Path | None:
        value = fields.string(key, required=False, max_len=4096)
        return config_dir / value if value is not None else None

    secret_file = path("client_secret_file")
    refresh_file = path("refresh_token_file")
    vault = _vault_place(fields)
    assertion = _assertion(fields, config_dir, token_url)
    uses = {
        GrantKind.REFRESH_TOKEN: ("refresh_token_file", "refresh_token_vault"),
        GrantKind.CLIENT_CREDENTIALS: ("client_secret_file",),
        GrantKind.JWT_BEARER: ("assertion_key_file",),
    }
    given = {
        "refresh_token_file": refresh_file,
        "refresh_token_vault": vault,
        "assertion_key_file": assertion,
    }
    for key, value in given.items():
        if value is not None and key not in uses[grant]:
            raise fields.fail(key, f"only with grant = {next(g for g, keys in uses.items() if key in keys)!r}")
    if grant is GrantKind.REFRESH_TOKEN and (refresh_file is None) == (vault is None):
        raise ConfigError(
            f"providers.{name}: set refresh_token_file, or refresh_token_vault and refresh_token_path"
            " (where the operator's refresh token is kept)"
        )
    if grant is GrantKind.CLIENT_CREDENTIALS and secret_file is None:
        raise fields.fail("client_secret_file", "required with grant = 'client_credentials'")
    if grant is GrantKind.JWT_BEARER and assertion is None:
        raise fields.fail("assertion_key_file", "required with grant = 'jwt_bearer'")
    ca_file = path("ca_file")
    return OAuthSettings(
        token_url=token_url,
        client_id=fields.req_string("client_id", pattern=CLIENT_ID, max_len=255, hint="printable, no spaces"),
        grant=grant,
        proxy_hosts=hosts,
        revocation_url=_url(fields, "revocation_url"),
        introspection_url=_url(fields, "introspection_url"),
        client_secret_file=secret_file,
        refresh_token_file=refresh_file,
        refresh_token_vault=vault,
        assertion=assertion,
        ca_file=ca_file,
        timeout=fields.integer("timeout", minimum=1, maximum=300) or 10,
    )


def _vault_place(fields: Fields) -> VaultPlace | None:
    instance = fields.string("refresh_token_vault", required=False, pattern=INSTANCE, hint="a vault instance's name")
    path = fields.string("refresh_token_path", required=False, pattern=KV_PATH, max_len=1024, hint="a KV v2 path")
    field = fields.string("refresh_token_field", required=False, pattern=KV_FIELD, hint="a KV field name")
    if instance is None:
        for key, value in (("refresh_token_path", path), ("refresh_token_field", field)):
            if value is not None:
                raise fields.fail(key, "only with refresh_token_vault")
        return None
    if path is None:
        raise fields.fail("refresh_token_path", "required with refresh_token_vault (the KV v2 path there)")
    return VaultPlace(instance, path, field or "refresh_token")


def _assertion(fields: Fields, config_dir: Path, token_url: str) -> Assertion | None:
    key_file = fields.string("assertion_key_file", required=False, max_len=4096)
    algorithm = fields.string("assertion_algorithm", required=False, max_len=16)
    issuer = fields.string("assertion_issuer", required=False, pattern=CLAIM, max_len=512)
    subject = fields.string("assertion_subject", required=False, pattern=CLAIM, max_len=512)
    audience = fields.string("assertion_audience", required=False, pattern=CLAIM, max_len=512)
    key_id = fields.string("assertion_key_id", required=False, pattern=KEY_ID, max_len=128)
    if key_file is None:
        for key, value in (
            ("assertion_algorithm", algorithm),
            ("assertion_issuer", issuer),
            ("assertion_subject", subject),
            ("assertion_audience", audience),
            ("assertion_key_id", key_id),
        ):
            if value is not None:
                raise fields.fail(key, "only with assertion_key_file")
        return None
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise fields.fail("assertion_algorithm", f"{shown(algorithm)}: one of {', '.join(ALGORITHMS)}")
    if subject is None:
        raise fields.fail("assertion_subject", "required with assertion_key_file (whom the token acts for)")
    client_id = fields.raw("client_id")
    return Assertion(
        key_file=config_dir / key_file,
        algorithm=algorithm or "RS256",
        issuer=issuer or (client_id if isinstance(client_id, str) else ""),
        subject=subject,
        audience=audience or token_url,
        key_id=key_id,
    )
