"""The oauth provider keeps the provider contract against a real authorisation server (authlib, TLS, loopback)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from providers.oauth.provider import OAuthProvider
from tests.fixtures.oauth import MakeOAuth, OAuthStack
from tests.providers.conformance import ProviderConformance, Subject, parse_request


class TestOAuthConformance(ProviderConformance):
    @pytest.fixture
    def subject(self, make_oauth_provider: MakeOAuth, oauth_stack: OAuthStack) -> Iterator[Subject]:
        request = parse_request(OAuthProvider, {"scopes": ["issues:read"]})
        yield Subject(
            make_oauth_provider(),
            request,
            works=lambda c: oauth_stack.active(c.secret.reveal()),
            gone=lambda c: not oauth_stack.active(c.secret.reveal()),
        )
