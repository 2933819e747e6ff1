"""Token exchange (RFC 8693): a model provider's workload identity federation, with no key of the broker's own.

Each credential is an access token the instance's ``token_endpoint`` gives
for a token of the broker's issuer naming the session (``sub``
``task:TASK:session:ID``, ``aud`` the instance's ``audience``, five
minutes): the provider trusts the issuer (its keys fetched from a JWKS URL,
or uploaded), and decides from the token's claims. The access token goes
only by the proxy (``inject: proxy``, ``proxy_only``): the sandbox holds a
placeholder, the proxy puts the token into ``Authorization`` for the
instance's ``proxy_hosts``, and a running exec renews it behind the same
placeholder before it ends (``broker.core.running.rotating``). Nothing
revokes it at the endpoint: it ends by itself, as the endpoint said
(``expires_in``), never after its session. ``broker doctor`` compares the
keys at ``jwks_url`` with the issuer's and makes a test exchange with a
token naming the broker itself.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

from broker.vocab.checks import Check
from broker.vocab.errors import BrokerError, ProviderError
from broker.vocab.fields import Fields
from providers.base import MintContext, MintedCredential, Provider, ProxyFacts, RevokeOutcome, RevokeTarget
from providers.capabilities import TokenIssuer
from providers.federation import fetch_json, issuer_keys_check
from providers.placeholders import token_placeholders, token_secret
from providers.token_exchange.endpoint import Endpoint, exchange
from providers.token_exchange.request import (
    ExchangeGrant,
    ExchangeRequest,
    compile_exchange_grant,
    exchange_narrower,
    parse_exchange_request,
)
from providers.urls import is_loopback_host

URL = re.compile(r"https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/%-]*)?", re.ASCII)
AUDIENCE = re.compile(r"[\x21-\x7e]{1,256}", re.ASCII)
CLIENT_ID = re.compile(r"[\x21-\x7e]{1,256}", re.ASCII)
#: The subject token only has to outlive the exchange.
SUBJECT_LIFETIME = 300


class TokenExchangeProvider(Provider[ExchangeRequest]):
    """Capabilities: ``UsesIssuer`` (the subject tokens), ``Narrowing`` (scopes), ``Placeholding``."""

    type_name = "token_exchange"
    proxy = ProxyFacts(label="Exchanged", documented_as="token_exchange", proxy_only=True)
    issuer_needed = "type"
    narrower = staticmethod(exchange_narrower)
    placeholders = staticmethod(token_placeholders)
    proxy_secret = staticmethod(token_secret)

    def __init__(self, endpoint: Endpoint, audience: str, jwks_url: str | None) -> None:
        super().__init__(endpoint.name)
        self.endpoint = endpoint
        self.audience = audience
        self.jwks_url = jwks_url
        self._issuer: TokenIssuer | None = None

    @classmethod
    def from_config(cls, name: str, fields: Fields, config_dir: Path) -> TokenExchangeProvider:
        url = _url(fields, "token_endpoint", required=True)
        assert url is not None
        ca_file = fields.string("ca_file", required=False, max_len=4096)
        endpoint = Endpoint(
            name=name,
            url=url,
            ca_file=str(config_dir / ca_file) if ca_file is not None else None,
            client_id=fields.string("client_id", required=False, pattern=CLIENT_ID, max_len=256),
            timeout=fields.integer("timeout", minimum=1, maximum=300) or 10,
        )
        audience = fields.req_string("audience", pattern=AUDIENCE, max_len=256, hint="printable, no spaces")
        return cls(endpoint, audience, _url(fields, "jwks_url", required=False))

    @classmethod
    def parse_request(cls, fields: Fields, *, name: str, provider: str, ttl: int | None) -> ExchangeRequest:
        return parse_exchange_request(fields, name=name, provider=provider, ttl=ttl)

    @classmethod
    def compile_grant(cls, fields: Fields, *, provider: str, max_ttl: int | None) -> ExchangeGrant:
        return compile_exchange_grant(fields, provider=provider, max_ttl=max_ttl)

    def use_issuer(self, issuer: TokenIssuer) -> None:
        self._issuer = issuer

    def _signer(self) -> TokenIssuer:
        if self._issuer is None:
            raise ProviderError(f"token_exchange {self.name}: the broker's issuer is not open", retryable=False)
        return self._issuer

    def mint(self, request: ExchangeRequest, context: MintContext) -> MintedCredential:
        purpose = f"token_exchange {self.name}"
        subject = self._signer().session_token(context, self.audience, SUBJECT_LIFETIME, purpose=purpose)
        got = exchange(self.endpoint, subject.token, request.scopes)
        now = datetime.now(UTC)
        lifetime = got.expires_in if got.expires_in is not None else context.ttl
        ends = min(now + timedelta(seconds=lifetime), context.session_expires_at)
        return MintedCredential(
            reference={"subject_jti": subject.jti, "endpoint": urlsplit(self.endpoint.url).netloc},
            secret=got.token,
            files={"token": got.token},
            expires_at=ends,
            scope=request.scope(),
        )

    def revoke(self, target: RevokeTarget, now: datetime) -> RevokeOutcome:
        """Nothing revokes an exchanged token at the endpoint: it ends by itself (its proxy drops it at once)."""
        if target.expires_at is not None and target.expires_at <= now:
            return RevokeOutcome.EXPIRED
        return RevokeOutcome.VALID_UNTIL_EXPIRY

    def health(self) -> list[Check]:
        """The keys at ``jwks_url`` against the issuer's; a test exchange of a token naming the broker."""
        issuer = self._signer()
        checks = []
        if self.jwks_url is not None:
            url = self.jwks_url
            fix = f"the endpoint must read the issuer's keys: serve them at {url}, or upload broker identity jwks"
            fetch = lambda: fetch_json(url, timeout=self.endpoint.timeout)  # noqa: E731
            checks.append(issuer_keys_check("keys", url, fetch, issuer.public_keys(), fix))
        else:
            detail = "no jwks_url: the endpoint holds uploaded keys; upload broker identity jwks after each rotate-key"
            checks.append(Check("keys", True, detail))
        try:
            token = issuer.broker_token(self.audience, 60, purpose=f"token_exchange {self.name} doctor")
            got = exchange(self.endpoint, token.token, ())
        except BrokerError as exc:
            fix = "let the endpoint trust the broker's issuer (its keys, its audience) and accept sub broker:HOST"
            return [*checks, Check("exchange", False, exc.message, fix)]
        lasts = f"{got.expires_in} s" if got.expires_in is not None else "an unstated time"
        return [*checks, Check("exchange", True, f"a test exchange gave a bearer token for {lasts} (not used)")]


def _url(fields: Fields, key: str, *, required: bool) -> str | None:
    value = fields.string(key, required=required, pattern=URL, max_len=1024, hint="https://host[:port]/path")
    if value is not None and not value.startswith("https://") and not is_loopback_host(urlsplit(value).hostname or ""):
        raise fields.fail(key, "must use https:// (plain http only for 127.0.0.0/8, ::1 or localhost)")
    return value
