"""What a manifest may ask of a ``token_exchange`` instance and what a policy grant allows: the scopes asked.

A request may name ``scopes`` (sent as the exchange's ``scope``); a grant lists
the scopes a rule allows (none: a request may ask for none). A child session's
scopes are among its parent's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from broker.vocab.fields import Fields, shown
from providers.base import CredentialRequest, Grant

#: RFC 6749's scope-token: printable ASCII without space, '"' or '\'.
SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,128}", re.ASCII)
SCOPE_HINT = "an RFC 6749 scope token"


@dataclass(frozen=True)
class ExchangeRequest(CredentialRequest):
    scopes: tuple[str, ...] = ()

    def scope(self) -> dict[str, Any]:
        return {"scopes": list(self.scopes)}


@dataclass(frozen=True)
class ExchangeGrant(Grant[ExchangeRequest]):
    scopes: tuple[str, ...] = ()

    def check(self, request: ExchangeRequest) -> list[str]:
        return [
            f"scope {shown(scope)} is not one the grant lists" for scope in request.scopes if scope not in self.scopes
        ]


def parse_exchange_request(fields: Fields, *, name: str, provider: str, ttl: int | None) -> ExchangeRequest:
    scopes = fields.string_list("scopes", required=False, pattern=SCOPE, min_items=0, max_items=32, hint=SCOPE_HINT)
    return ExchangeRequest(name=name, provider=provider, ttl=ttl, scopes=scopes or ())


def compile_exchange_grant(fields: Fields, *, provider: str, max_ttl: int | None) -> ExchangeGrant:
    scopes = fields.string_list("scopes", required=False, pattern=SCOPE, min_items=0, max_items=64, hint=SCOPE_HINT)
    return ExchangeGrant(provider=provider, max_ttl=max_ttl, scopes=scopes or ())


def exchange_narrower(child: ExchangeRequest, parent: ExchangeRequest) -> list[str]:
    return [
        f"scopes[{index}]: {shown(scope)} is not one of the parent's scopes"
        for index, scope in enumerate(child.scopes)
        if scope not in parent.scopes
    ]
