"""What a manifest may ask of the ``oauth`` provider and what a grant allows: scopes within the grant's, exactly."""

from __future__ import annotations

import re
from typing import Any

import pytest

from broker.vocab.errors import ManifestError, PolicyFileError
from broker.vocab.fields import Fields
from providers.oauth.provider import OAuthProvider
from providers.oauth.request import OAuthGrant, OAuthRequest


def parse(data: dict[str, Any]) -> OAuthRequest:
    fields = Fields(data, "credentials[0]", ManifestError)
    request = OAuthProvider.parse_request(fields, name="mcp", provider="oauth", ttl=None)
    fields.done()
    return request


def grant(data: dict[str, Any]) -> OAuthGrant:
    fields = Fields(data, "rules[0].grants[0]", PolicyFileError)
    compiled = OAuthProvider.compile_grant(fields, provider="oauth", max_ttl=None)
    fields.done()
    return compiled


def test_scopes_within_the_grant_are_covered_and_each_other_is_named() -> None:
    request = parse({"scopes": ["issues:read", "pulls:write"], "hosts": ["mcp.example.com:443"]})
    assert request.scope() == {"scopes": ["issues:read", "pulls:write"], "hosts": ["mcp.example.com:443"]}
    assert grant({"scopes": ["issues:read", "pulls:write", "x"]}).check(request) == []
    assert grant({"scopes": ["issues:read"]}).check(request) == [
        "scopes[1]: 'pulls:write' is not granted (the grant's scopes: issues:read)"
    ]
    assert grant({"scopes": ["issues:*"]}).check(parse({"scopes": ["issues:read"]})) != []  # exact, never a glob


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "credentials[0].scopes: required"),
        ({"scopes": []}, "credentials[0].scopes: needs at least 1 item"),
        ({"scopes": ["a b"]}, "credentials[0].scopes[0]: 'a b' is not valid"),
        ({"scopes": ['a"b']}, "is not valid (an OAuth scope token)"),
        ({"scopes": ["a", "a"]}, "credentials[0].scopes[1]: 'a' is listed twice"),
        ({"scopes": [f"s{i}" for i in range(33)]}, "credentials[0].scopes: has more than 32 items"),
        ({"scopes": ["a"], "hosts": ["MCP.example.com"]}, "credentials[0].hosts[0]"),
        ({"scopes": ["a"], "audience": "x"}, "audience"),
    ],
)
def test_a_bad_request_is_refused_naming_the_key(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ManifestError, match=re.escape(message)):
        parse(data)


def test_a_grant_lists_its_scopes() -> None:
    with pytest.raises(PolicyFileError, match=r"rules\[0\].grants\[0\].scopes: required"):
        grant({})
