"""The ``oauth`` provider's configuration, without a server: the three grants, and each refusal naming its key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from broker.vocab.errors import ConfigError, ProviderError
from broker.vocab.fields import Fields
from providers.base import RevokeOutcome, RevokeTarget
from providers.oauth.provider import OAuthProvider
from providers.oauth.settings import GrantKind

BASE = {
    "token_url": "https://auth.example.com/oauth/token",
    "client_id": "broker",
    "proxy_hosts": ["mcp.example.com:443"],
}


def build(table: dict[str, Any]) -> OAuthProvider:
    fields = Fields({**table}, "providers.oauth", ConfigError)
    provider = OAuthProvider.from_config("oauth", fields, Path("/etc/broker"))
    fields.done()
    return provider


def test_the_refresh_token_grant_is_the_default_kept_in_a_file_or_in_vault() -> None:
    provider = build({**BASE, "refresh_token_file": "rt", "client_secret_file": "cs"})
    settings = provider.settings
    assert settings.grant is GrantKind.REFRESH_TOKEN
    assert settings.refresh_token_file == Path("/etc/broker/rt")
    assert settings.client_secret_file == Path("/etc/broker/cs")
    vault = build({**BASE, "refresh_token_vault": "vault", "refresh_token_path": "oauth/mcp"}).settings
    assert vault.refresh_token_vault is not None
    assert (vault.refresh_token_vault.instance, vault.refresh_token_vault.field) == ("vault", "refresh_token")


def test_client_credentials_and_jwt_bearer() -> None:
    assert build({**BASE, "grant": "client_credentials", "client_secret_file": "cs"}).settings.grant == (
        GrantKind.CLIENT_CREDENTIALS
    )
    assertion = build(
        {**BASE, "grant": "jwt_bearer", "assertion_key_file": "k.pem", "assertion_subject": "op@example.com"}
    ).settings.assertion
    assert assertion is not None
    assert (assertion.issuer, assertion.audience, assertion.algorithm) == ("broker", BASE["token_url"], "RS256")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"refresh_token_file": "rt", "token_url": "http://auth.example.com/t"}, "providers.oauth.token_url: "),
        ({"refresh_token_file": "rt", "token_url": "https://u:p@auth.example.com/t"}, "is not an https:// URL"),
        ({"refresh_token_file": "rt", "proxy_hosts": None}, "proxy_hosts: required: an OAuth token goes only by"),
        ({}, "set refresh_token_file, or refresh_token_vault and refresh_token_path"),
        ({"refresh_token_file": "rt", "refresh_token_vault": "vault", "refresh_token_path": "p"}, "set refresh_token"),
        ({"refresh_token_vault": "vault"}, "refresh_token_path: required with refresh_token_vault"),
        (
            {"refresh_token_file": "rt", "refresh_token_field": "f"},
            "refresh_token_field: only with refresh_token_vault",
        ),
        ({"grant": "password"}, "providers.oauth.grant: 'password': one of refresh_token, client_credentials"),
        ({"grant": "client_credentials"}, "client_secret_file: required with grant = 'client_credentials'"),
        ({"grant": "client_credentials", "client_secret_file": "c", "refresh_token_file": "r"}, "only with grant"),
        ({"grant": "jwt_bearer"}, "assertion_key_file: required with grant = 'jwt_bearer'"),
        ({"grant": "jwt_bearer", "assertion_key_file": "k"}, "assertion_subject: required with assertion_key_file"),
        (
            {
                "grant": "jwt_bearer",
                "assertion_key_file": "k",
                "assertion_subject": "s",
                "assertion_algorithm": "HS256",
            },
            "assertion_algorithm: 'HS256': one of RS256, PS256, ES256, EdDSA",
        ),
        ({"refresh_token_file": "rt", "assertion_subject": "s"}, "assertion_subject: only with assertion_key_file"),
        ({"refresh_token_file": "rt", "client_id": "has space"}, "client_id: 'has space' is not valid"),
        ({"refresh_token_file": "rt", "surprise": 1}, "surprise"),
    ],
)
def test_a_broken_table_is_refused_in_one_line_naming_the_key(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build({key: value for key, value in {**BASE, **table}.items() if value is not None})
    assert message in caught.value.message
    assert "\n" not in caught.value.message


def test_without_a_revocation_endpoint_a_token_is_valid_until_it_ends() -> None:
    provider = build({**BASE, "refresh_token_file": "rt"})
    now = datetime.now(UTC)
    ends = {"token_expires_at": (now + timedelta(minutes=5)).isoformat()}
    assert provider.revoke(RevokeTarget("mcp", ends, now), now) is RevokeOutcome.VALID_UNTIL_EXPIRY
    assert provider.revoke(RevokeTarget("mcp", ends, now), now + timedelta(minutes=6)) is RevokeOutcome.EXPIRED


def test_a_token_whose_kept_copy_is_lost_is_not_revocable_but_ends_within_the_hour() -> None:
    provider = build({**BASE, "refresh_token_file": "rt", "revocation_url": "https://auth.example.com/revoke"})
    now = datetime.now(UTC)
    target = RevokeTarget("mcp", {"token_expires_at": (now + timedelta(minutes=5)).isoformat()}, now)
    with pytest.raises(ProviderError, match="no token kept for mcp, so it cannot be revoked; it stays valid until"):
        provider.revoke(target, now)
    assert provider.revoke(target, now + timedelta(minutes=6)) is RevokeOutcome.EXPIRED
    assert provider.fixed_lifetime == 3600
