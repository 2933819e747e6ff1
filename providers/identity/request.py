"""What a manifest may ask of the ``identity`` provider and what a policy grant allows: an audience.

A request names the one ``audience`` its token is for (the ``aud`` a
verifier checks: a URL, ``sts.amazonaws.com``, a Vault role's bound
audience); a grant lists the audiences a rule may ask for, compared exactly:
an audience is where the token is good, so a pattern would grant more than
it names. A child session's token is for its parent's audience or none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from broker.vocab.fields import Fields, shown
from providers.base import CredentialRequest, Grant

#: Printable, no spaces: a URL, a host name, an ARN-like name.
AUDIENCE = re.compile(r"[\x21-\x7e]{1,256}", re.ASCII)
AUDIENCE_HINT = "printable, no spaces, at most 256 characters"


@dataclass(frozen=True)
class IdentityRequest(CredentialRequest):
    audience: str = ""

    def scope(self) -> dict[str, Any]:
        return {"audience": self.audience}


@dataclass(frozen=True)
class IdentityGrant(Grant[IdentityRequest]):
    audiences: tuple[str, ...] = ()

    def check(self, request: IdentityRequest) -> list[str]:
        if request.audience in self.audiences:
            return []
        return [f"audience {shown(request.audience, 80)} is not one the grant lists ({', '.join(self.audiences)})"]


def parse_identity_request(fields: Fields, *, name: str, provider: str, ttl: int | None) -> IdentityRequest:
    audience = fields.req_string("audience", pattern=AUDIENCE, max_len=256, hint=AUDIENCE_HINT)
    return IdentityRequest(name=name, provider=provider, ttl=ttl, audience=audience)


def compile_identity_grant(fields: Fields, *, provider: str, max_ttl: int | None) -> IdentityGrant:
    audiences = fields.string_list("audiences", pattern=AUDIENCE, max_items=64, max_len=256, hint=AUDIENCE_HINT)
    assert audiences is not None
    return IdentityGrant(provider=provider, max_ttl=max_ttl, audiences=audiences)


def identity_narrower(child: IdentityRequest, parent: IdentityRequest) -> list[str]:
    """A child's token is for its parent's audience, or it is wider."""
    if child.audience == parent.audience:
        return []
    return [f"audience: {shown(child.audience, 80)} is not the parent's ({shown(parent.audience, 80)})"]
