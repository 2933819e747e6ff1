"""The other two grants against the real authorisation server: the client's own credentials, and an RFC 7523
JWT bearer assertion the broker signs with the operator's key (pyjwt); and what the server's refusals become."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from broker.vocab.errors import ConfigError, ProviderError
from providers.base import MintRejected, RevokeOutcome
from providers.oauth.provider import OAuthProvider, OAuthRequest
from tests.fixtures.oauth import OPERATOR, MakeOAuth, OAuthStack
from tests.providers.conformance import context, parse_request, target

pytestmark = pytest.mark.server


def ask(scopes: list[str]) -> OAuthRequest:
    request = parse_request(OAuthProvider, {"scopes": scopes})
    assert isinstance(request, OAuthRequest)
    return request


def test_client_credentials_mint_a_token_for_the_client_itself(
    make_oauth_provider: MakeOAuth, oauth_stack: OAuthStack
) -> None:
    provider = make_oauth_provider(grant="client_credentials")
    request = ask(["issues:read"])
    minted = provider.mint(request, context("s-client00001"))
    token = oauth_stack.ledger.find(minted.secret.reveal())
    assert token.user is None and token.client_id == "broker" and token.scope == "issues:read"
    assert token.resources == (oauth_stack.resource.resource,)
    assert provider.revoke(target(request, minted), datetime.now(UTC)) is RevokeOutcome.REVOKED
    assert token.revoked


def test_a_jwt_bearer_assertion_mints_a_token_acting_for_its_subject(
    make_oauth_provider: MakeOAuth, oauth_stack: OAuthStack
) -> None:
    provider = make_oauth_provider(
        grant="jwt_bearer",
        assertion_key_file=str(oauth_stack.assertion_key),
        assertion_algorithm="ES256",
        assertion_subject=OPERATOR,
        client_secret_file=None,
    )
    minted = provider.mint(ask(["pulls:write"]), context("s-jwtbear0001"))
    token = oauth_stack.ledger.find(minted.secret.reveal())
    assert token.user == OPERATOR and token.scope == "pulls:write"
    assert oauth_stack.ledger.grants["urn:ietf:params:oauth:grant-type:jwt-bearer"] == 1


def test_an_assertion_for_a_subject_the_client_may_not_act_for_is_refused_naming_the_assertion(
    make_oauth_provider: MakeOAuth, oauth_stack: OAuthStack
) -> None:
    provider = make_oauth_provider(
        grant="jwt_bearer",
        assertion_key_file=str(oauth_stack.assertion_key),
        assertion_algorithm="ES256",
        assertion_subject="someone-else@example.com",
    )
    with pytest.raises(ConfigError, match=r"refused the JWT bearer assertion \(assertion_\*\)"):
        provider.mint(ask(["pulls:write"]), context("s-jwtbear0002"))
    assert not oauth_stack.ledger.live()


def test_a_wrong_client_secret_is_the_operators_to_fix(
    make_oauth_provider: MakeOAuth, oauth_stack: OAuthStack, tmp_path: Path
) -> None:
    provider = make_oauth_provider(client_secret_file=str(oauth_stack.write_private("wrong", "not-the-secret")))
    with pytest.raises(ConfigError, match="refused the client 'broker' .*: check client_id and client_secret_file"):
        provider.mint(ask(["issues:read"]), context("s-wrongsec001"))


def test_a_server_whose_certificate_is_not_trusted_is_refused_before_any_token_is_sent(
    make_oauth_provider: MakeOAuth, oauth_stack: OAuthStack
) -> None:
    provider = make_oauth_provider(ca_file=None)
    with pytest.raises(ProviderError, match="TLS with 127.0.0.1:[0-9]+ failed for its token endpoint"):
        provider.mint(ask(["issues:read"]), context("s-untrusted01"))
    assert sum(oauth_stack.ledger.grants.values()) == 0


def test_a_token_living_longer_than_an_hour_is_withheld(
    make_oauth_provider: MakeOAuth, oauth_stack: OAuthStack
) -> None:
    oauth_stack.server.access_lifetime = 7200
    provider = make_oauth_provider()
    request = ask(["issues:read"])
    with pytest.raises(MintRejected, match="it lives 7200 s, longer than the 3600 s") as caught:
        provider.mint(request, context("s-toolong0001"))
    # the core revokes what it withholds: the token is revocable with what the provider handed over
    assert provider.revoke(target(request, caught.value.credential), datetime.now(UTC)) is RevokeOutcome.REVOKED
    assert not oauth_stack.ledger.live()
