"""The GitHub App provider keeps the provider contract against the project's GitHub App emulator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devstack.github_app import GitHubAppEmulator
from providers.base import MintedCredential
from providers.github.provider import GitHubAppProvider
from tests.fixtures.github import MakeProvider
from tests.providers.conformance import ProviderConformance, Subject, parse_request


def token_of(credential: MintedCredential) -> str:
    return credential.secret.reveal()


class TestGitHubConformance(ProviderConformance):
    @pytest.fixture
    def subject(self, make_github_provider: MakeProvider, github_emulator: GitHubAppEmulator) -> Iterator[Subject]:
        request = parse_request(
            GitHubAppProvider, {"repositories": ["octo-org/widgets"], "permissions": {"contents": "read"}}
        )
        yield Subject(
            make_github_provider(),
            request,
            works=lambda c: github_emulator.token_state(token_of(c)) == "valid",
            gone=lambda c: github_emulator.token_state(token_of(c)) == "revoked",
        )
