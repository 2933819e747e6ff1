"""Session tokens: a JWT per credential, signed by the broker as an OpenID Connect issuer (``[identity]``).

The token's ``sub`` is ``task:TASK:session:ID``; it carries the session's
claims (``task``, ``session``, ``rule``, ``requester``, ``sandbox_uid``,
``parent``) for the ``audience`` the manifest asks and a grant lists, ends
within an hour and within the session (``max_ttl``), and is handed over as
the file ``NAME/token``. A running exec writes a new one before it ends, as a
Kubernetes projected token (``projected``); ``broker renew`` does otherwise.
Nothing at a provider holds it: revoking records it, and the issuer lists a
revoked session's tokens by ``jti`` at ``/.well-known/revoked``
(``revoked_by_jti``) until they end. With ``inject: proxy`` the proxy puts it
into requests to the instance's ``proxy_hosts`` as a bearer token.

The issuer itself is the core's (``broker.core.identity``), handed over as a
``TokenIssuer`` (``UsesIssuer``); the provider signs nothing on its own.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from broker.vocab.errors import ProviderError
from broker.vocab.fields import Fields
from providers.base import MintContext, MintedCredential, Provider, ProxyFacts, RevokeOutcome, RevokeTarget
from providers.capabilities import MAX_TOKEN_LIFETIME, TokenIssuer
from providers.identity.request import (
    IdentityGrant,
    IdentityRequest,
    compile_identity_grant,
    identity_narrower,
    parse_identity_request,
)
from providers.placeholders import token_placeholders, token_secret

#: What names the token in the log: ``credential.issued`` records it with its reference (its ``jti``).
PURPOSE = "credential"


class IdentityProvider(Provider[IdentityRequest]):
    """Capabilities: ``UsesIssuer`` (the issuer signs), ``Narrowing`` (the same audience), ``Placeholding``."""

    type_name = "identity"
    max_ttl = MAX_TOKEN_LIFETIME
    min_ttl = 5
    projected = True
    revoked_by_jti = True
    proxy = ProxyFacts(label="identity token", documented_as="identity")
    issuer_needed = "type"
    narrower = staticmethod(identity_narrower)
    placeholders = staticmethod(token_placeholders)
    proxy_secret = staticmethod(token_secret)

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._issuer: TokenIssuer | None = None

    @classmethod
    def from_config(cls, name: str, fields: Fields, config_dir: Path) -> IdentityProvider:
        return cls(name)

    @classmethod
    def parse_request(cls, fields: Fields, *, name: str, provider: str, ttl: int | None) -> IdentityRequest:
        return parse_identity_request(fields, name=name, provider=provider, ttl=ttl)

    @classmethod
    def compile_grant(cls, fields: Fields, *, provider: str, max_ttl: int | None) -> IdentityGrant:
        return compile_identity_grant(fields, provider=provider, max_ttl=max_ttl)

    def use_issuer(self, issuer: TokenIssuer) -> None:
        self._issuer = issuer

    def mint(self, request: IdentityRequest, context: MintContext) -> MintedCredential:
        if self._issuer is None:
            raise ProviderError(f"identity {self.name}: the broker's issuer is not open", retryable=False)
        signed = self._issuer.session_token(context, request.audience, context.ttl, purpose=PURPOSE)
        return MintedCredential(
            reference={"jti": signed.jti, "kid": signed.kid, "audience": signed.audience},
            secret=signed.token,
            files={"token": signed.token},
            expires_at=signed.expires_at,
            scope=request.scope(),
        )

    def revoke(self, target: RevokeTarget, now: datetime) -> RevokeOutcome:
        """Nothing to call: the token is listed at ``/.well-known/revoked`` once its session is revoked."""
        if target.expires_at is not None and target.expires_at <= now:
            return RevokeOutcome.EXPIRED
        return RevokeOutcome.REVOKED
