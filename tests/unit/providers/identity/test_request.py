"""What a manifest may ask of the ``identity`` type and what a grant allows: audiences, compared exactly."""

from __future__ import annotations

import pytest

from broker.vocab.errors import ManifestError, PolicyFileError
from broker.vocab.fields import Fields
from providers.identity.provider import IdentityProvider
from providers.identity.request import IdentityRequest


def request(audience: object) -> IdentityRequest:
    fields = Fields({"audience": audience}, "credentials[0]", ManifestError)
    return IdentityProvider.parse_request(fields, name="api", provider="identity", ttl=None)


def test_a_grant_covers_the_audiences_it_lists_and_no_other() -> None:
    fields = Fields({"audiences": ["https://api.example.com", "sts.amazonaws.com"]}, "grants[0]", PolicyFileError)
    grant = IdentityProvider.compile_grant(fields, provider="identity", max_ttl=None)
    assert grant.check(request("https://api.example.com")) == []
    assert grant.check(request("https://api.example.com/")) != []  # exactly, not a prefix
    assert grant.check(request("https://evil.example.com")) == [
        "audience 'https://evil.example.com' is not one the grant lists (https://api.example.com, sts.amazonaws.com)"
    ]


@pytest.mark.parametrize("audience", ["", "has space", 5, "x" * 257])
def test_an_audience_is_one_printable_word(audience: object) -> None:
    with pytest.raises(ManifestError, match=r"credentials\[0\]\.audience"):
        request(audience)


def test_a_child_token_is_for_its_parents_audience_only() -> None:
    parent = request("https://api.example.com")
    assert IdentityProvider.narrower(request("https://api.example.com"), parent) == []
    assert IdentityProvider.narrower(request("https://other.example.com"), parent) == [
        "audience: 'https://other.example.com' is not the parent's ('https://api.example.com')"
    ]
