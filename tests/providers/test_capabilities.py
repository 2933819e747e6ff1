"""Which capability each provider type has, as docs/architecture.md's table says (no server needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.vocab.errors import ConfigError
from broker.vocab.fields import Fields
from broker.vocab.manual import ProviderManual
from providers.capabilities import CAPABILITIES, Placeholding
from providers.registry import known_types, provider_class

TABLES: dict[str, dict[str, Any]] = {
    "vault": {"type": "vault", "addr": "http://127.0.0.1:8200", "token_file": "t"},
    "aws_sts": {"type": "aws_sts", "region": "us-east-1"},
    "github_app": {"type": "github_app", "app_id": "1", "private_key_file": "k.pem"},
    "oauth": {
        "type": "oauth",
        "token_url": "https://auth.example.com/token",
        "client_id": "broker",
        "refresh_token_file": "rt",
        "proxy_hosts": ["mcp.example.com:443"],
    },
    "identity": {"type": "identity"},
    "token_exchange": {
        "type": "token_exchange",
        "token_endpoint": "https://auth.model.example/oauth/token",
        "audience": "https://api.model.example",
    },
}
EXPECTED = {
    "vault": {
        "Warming",
        "FindsMinted",
        "ChecksGrants",
        "Refreshing",
        "Narrowing",
        "VersionedSecrets",
        "Placeholding",
        "KeepsSecrets",
        "UsesIssuer",
        "TransitSigning",
    },
    "aws_sts": {"Warming", "FindsMinted", "Reserving", "SharesLocks", "Narrowing", "Placeholding", "UsesIssuer"},
    "github_app": {"Warming", "Narrowing", "Placeholding"},
    "oauth": {"Warming", "SharesLocks", "Placeholding", "UsesKeptSecrets"},
    "identity": {"Narrowing", "Placeholding", "UsesIssuer"},
    "token_exchange": {"Narrowing", "Placeholding", "UsesIssuer"},
}


@pytest.mark.parametrize("type_name", sorted(TABLES))
def test_each_provider_has_the_capabilities_the_architecture_names(type_name: str) -> None:
    fields = Fields(TABLES[type_name], f"providers.{type_name}", ConfigError)
    fields.raw("type")
    provider = provider_class(type_name).from_config(type_name, fields, Path("/etc/broker"))
    fields.done()
    assert {c.__name__ for c in CAPABILITIES if isinstance(provider, c)} == EXPECTED[type_name]


def test_every_registered_type_declares_its_facts() -> None:
    assert set(known_types()) == set(TABLES)
    for type_name in known_types():
        cls = provider_class(type_name)
        assert isinstance(cls.manual(), ProviderManual), type_name
        assert cls.manual().example.startswith("# [providers."), type_name
        assert all(name == name.upper() for name in (*cls.reserved_env, *cls.ca_env)), type_name
        if cls.proxy is not None:
            assert all(header == header.lower() for header in cls.proxy.token_headers), type_name
        # a type whose credentials can be inject: proxy hands the core their placeholders, and only such a type
        assert issubclass(cls, Placeholding) == (cls.proxy is not None), type_name
