"""What a manifest may ask of the ``oauth`` provider and what a policy grant allows: scopes, and the hosts.

A request names the scopes its token carries (1 to 32 scope tokens, as RFC
6749 section 3.3 spells them) and, optionally, which of the instance's proxy
hosts the token is for (the RFC 8707 resources it is asked for; all of the
instance's when left out). A grant lists the scopes it allows, exactly: a
scope it does not list is denied, and a grant without scopes grants none.
Scopes are compared as the authorisation server compares them, exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from broker.vocab.fields import Fields, shown
from providers.base import CredentialRequest, Grant

#: A scope token (RFC 6749 section 3.3): printable ASCII but space, '"' and '\'.
SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,128}")
#: ``HOST:PORT`` as far as the provider looks (the config parses the instance's proxy hosts strictly).
HOST = re.compile(r"[a-z0-9.-]{1,253}:[0-9]{1,5}|\[[0-9a-f:.]{2,45}\]:[0-9]{1,5}")
MAX_SCOPES = 32


@dataclass(frozen=True)
class OAuthRequest(CredentialRequest):
    scopes: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()  # HOST:PORT, among the instance's proxy_hosts; empty: all of them

    def scope(self) -> dict[str, Any]:
        document: dict[str, Any] = {"scopes": list(self.scopes)}
        if self.hosts:
            document["hosts"] = list(self.hosts)
        return document


@dataclass(frozen=True)
class OAuthGrant(Grant[OAuthRequest]):
    scopes: tuple[str, ...] = ()

    def check(self, request: OAuthRequest) -> list[str]:
        return [
            f"scopes[{index}]: {shown(scope)} is not granted (the grant's scopes: {', '.join(self.scopes) or 'none'})"
            for index, scope in enumerate(request.scopes)
            if scope not in self.scopes
        ]


def parse_request(fields: Fields, *, name: str, provider: str, ttl: int | None) -> OAuthRequest:
    """The ``scopes`` and ``hosts`` of one manifest credential (untrusted input)."""
    scopes = fields.string_list("scopes", pattern=SCOPE, max_items=MAX_SCOPES, max_len=128, hint="an OAuth scope token")
    assert scopes is not None  # at least one: a token asked for without a scope would carry the whole grant's
    hosts = fields.string_list("hosts", required=False, pattern=HOST, max_items=16, max_len=262, hint="HOST:PORT")
    return OAuthRequest(name=name, provider=provider, ttl=ttl, scopes=scopes, hosts=hosts or ())


def compile_grant(fields: Fields, *, provider: str, max_ttl: int | None) -> OAuthGrant:
    """The ``scopes`` one policy grant allows (exact names; none listed: none granted)."""
    scopes = fields.string_list("scopes", pattern=SCOPE, max_items=256, max_len=128, hint="an OAuth scope token")
    assert scopes is not None
    return OAuthGrant(provider=provider, max_ttl=max_ttl, scopes=scopes)
