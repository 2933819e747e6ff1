"""What a provider of one token hands the core for ``inject: proxy`` (``providers.placeholders``): the token's
placeholder in every file that held the token, the token for the proxy, and no credential whose files hold any
other secret."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from broker.vocab.errors import ConfigError, ProviderError
from broker.vocab.fields import Fields
from broker.vocab.secret import Secret
from providers.base import CredentialRequest, MintedCredential
from providers.capabilities import Placeholding
from providers.placeholders import token_placeholders
from providers.registry import provider_class

NOW = datetime(2030, 1, 1, tzinfo=UTC)
TOKEN = Secret("ghs_" + "s" * 36)
REQUEST = CredentialRequest("repo", "github", None)


def test_every_file_holding_the_token_holds_its_placeholder_and_the_proxy_gets_the_token() -> None:
    credential = MintedCredential({}, TOKEN, {"token": TOKEN, "gitconfig": "[credential]\n"}, NOW, {})
    held = token_placeholders(REQUEST, credential, "https://api.github.com")
    assert held.secret == TOKEN
    assert isinstance(held.placeholder, Secret) and held.placeholder != TOKEN
    assert held.placeholder.reveal().startswith("ghs_") and len(held.placeholder) == len(TOKEN)
    assert held.files == {"token": held.placeholder, "gitconfig": "[credential]\n"}


def test_a_file_holding_another_secret_is_refused() -> None:
    credential = MintedCredential({}, TOKEN, {"token": TOKEN, "key": Secret("another")}, NOW, {})
    with pytest.raises(ProviderError) as refused:
        token_placeholders(REQUEST, credential, "")
    assert refused.value.message == "credential 'repo': a file holds another secret the proxy cannot stand in for"


@pytest.mark.parametrize(
    ("type_name", "table"),
    [
        ("github_app", {"type": "github_app", "app_id": "1", "private_key_file": "k.pem"}),
        ("vault", {"type": "vault", "addr": "http://127.0.0.1:8200", "token_file": "t"}),
    ],
)
def test_github_and_vault_hand_over_their_token_this_way(type_name: str, table: dict[str, str]) -> None:
    fields = Fields(table, f"providers.{type_name}", ConfigError)
    fields.raw("type")
    provider = provider_class(type_name).from_config(type_name, fields, Path("/etc/broker"))
    fields.done()
    assert isinstance(provider, Placeholding)
    credential = MintedCredential({}, TOKEN, {"token": TOKEN}, NOW, {})
    assert provider.proxy_secret(credential) == TOKEN
    held = provider.placeholders(REQUEST, credential, "")
    assert held.secret == TOKEN and held.files == {"token": held.placeholder}
