"""OAuth 2 access tokens: one per credential, minted for the session's scopes and hosts, held by the proxy alone.

The broker gets each token from what the operator gave it (``grant``): the
operator's refresh token (its rotated successor written back inside one
flight per token across processes and hosts: ``providers.oauth.grants``),
the client's own credentials, or a JWT bearer assertion (RFC 7523). It asks
for the manifest's ``scopes`` (each within the grant's) and, as RFC 8707
resources, the hosts the token is for (``https://HOST[:PORT]`` of the
instance's ``proxy_hosts``, or those of them the manifest names). An answer
that is not a Bearer token, does not say when it ends, lives longer than an
hour (``fixed_lifetime``: what bounds a token a crash left unrecorded) or
carries a scope not asked for is withheld (the core revokes it at once).
Its credentials go only by the proxy (``inject: proxy``): the sandbox's
``NAME/token`` holds a placeholder, the proxy puts the token into
``Authorization: Bearer`` of requests to the proxy hosts, and a running
session renews it behind the same placeholder before it ends. Revocation is
RFC 7009 with the token itself (kept on tmpfs only); without a
``revocation_url`` a token stays valid until its end at the server.
``requests`` and ``jwt`` are imported on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

from broker.vocab.checks import Check
from broker.vocab.errors import ConfigError, ManifestError, ProviderError
from broker.vocab.fields import Fields
from broker.vocab.time import iso
from providers.base import (
    MintContext,
    MintedCredential,
    MintRejected,
    Provider,
    ProxyFacts,
    RevokeOutcome,
    RevokeTarget,
)
from providers.capabilities import FleetState
from providers.clock import aware, parse_time
from providers.oauth.endpoint import Endpoints, Refused, TokenAnswer
from providers.oauth.flight import RefreshFlight
from providers.oauth.grants import ClientCredentials, JwtBearer, NotKept, Obtaining, RefreshGrant
from providers.oauth.health import oauth_health
from providers.oauth.keep import FileKeep, Keep, VaultKeep
from providers.oauth.request import OAuthGrant, OAuthRequest, compile_grant, parse_request
from providers.oauth.settings import GrantKind, OAuthSettings, read_settings
from providers.placeholders import token_placeholders, token_secret
from providers.warm import Sdk

__all__ = ["OAuthGrant", "OAuthProvider", "OAuthRequest"]

LIFETIME = 3600  # the longest an access token may live at the server: a crash's unrecorded token dies by then


class OAuthProvider(Provider[OAuthRequest]):
    """Capabilities: ``Warming``, ``SharesLocks`` (the refresh's single flight), ``Placeholding``,
    ``UsesKeptSecrets`` (a refresh token kept in Vault). It cannot search for tokens (``FindsMinted``): they
    die within the hour."""

    type_name = "oauth"
    fixed_lifetime = LIFETIME
    revokes_with_kept_secret = True  # RFC 7009: the token revokes itself
    proxy = ProxyFacts(label="OAuth", documented_as="oauth", proxy_only=True)
    placeholders = staticmethod(token_placeholders)
    proxy_secret = staticmethod(token_secret)
    warm_first = False
    sdk = Sdk(("requests", "jwt", "filelock"), revoking=("requests",))

    def __init__(self, name: str, settings: OAuthSettings) -> None:
        super().__init__(name)
        self.settings = settings
        self.endpoints = Endpoints(name, settings)
        self.keep: Keep | None = None
        self.flight: RefreshFlight | None = None
        self.in_fleet = False
        self.grant: Obtaining
        if settings.grant is GrantKind.REFRESH_TOKEN:
            if settings.refresh_token_file is not None:
                self.keep = FileKeep(name, settings.refresh_token_file)
            else:
                assert settings.refresh_token_vault is not None
                self.keep = VaultKeep(name, settings.refresh_token_vault)
            self.flight = RefreshFlight(settings.token_url, settings.client_id, self.keep.where)
            self.grant = RefreshGrant(self.endpoints, self.keep, self.flight)
        elif settings.grant is GrantKind.CLIENT_CREDENTIALS:
            self.grant = ClientCredentials(self.endpoints)
        else:
            assert settings.assertion is not None
            self.grant = JwtBearer(self.endpoints, settings.assertion)

    # -- configuration -------------------------------------------------------------------

    @classmethod
    def from_config(cls, name: str, fields: Fields, config_dir: Path) -> OAuthProvider:
        return cls(name, read_settings(name, fields, config_dir))

    @classmethod
    def parse_request(cls, fields: Fields, *, name: str, provider: str, ttl: int | None) -> OAuthRequest:
        return parse_request(fields, name=name, provider=provider, ttl=ttl)

    @classmethod
    def compile_grant(cls, fields: Fields, *, provider: str, max_ttl: int | None) -> OAuthGrant:
        return compile_grant(fields, provider=provider, max_ttl=max_ttl)

    def use_lock_dir(self, path: Path) -> None:
        if self.flight is not None:
            self.flight.lock_dir = path

    def use_fleet(self, fleet: FleetState) -> None:
        self.in_fleet = True
        if self.flight is not None:
            self.flight.fleet = fleet

    def use_keepers(self, instances: Mapping[str, object]) -> None:
        if isinstance(self.keep, VaultKeep):
            self.keep.use(instances)

    def preload(self, minting: bool) -> None:
        self.sdk.load(minting)

    def warm_up(self, minting: bool) -> None:
        self.preload(minting)
        self.endpoints.warm_up()

    # -- provider calls ------------------------------------------------------------------

    def resources(self, request: OAuthRequest) -> list[str]:
        """The RFC 8707 resources of ``request``: its hosts (each one of the proxy hosts), or all proxy hosts."""
        hosts = self.settings.proxy_hosts
        for index, host in enumerate(request.hosts):
            if host not in hosts:
                raise ManifestError(
                    f"credential {request.name!r}: hosts[{index}]: {host} is not one of providers.{self.name}"
                    f".proxy_hosts ({', '.join(hosts)})"
                )
        return [_resource(host) for host in request.hosts or hosts]

    def mint(self, request: OAuthRequest, context: MintContext) -> MintedCredential:
        resources = self.resources(request)
        if self.in_fleet and self.keep is not None and not self.keep.shared:
            raise ConfigError(
                f"providers.{self.name}.refresh_token_file: a fleet's hosts cannot share a file; keep the refresh"
                " token in Vault (refresh_token_vault)"
            )
        asked = [("scope", " ".join(request.scopes)), *(("resource", resource) for resource in resources)]
        try:
            answer = self.grant.obtain(asked)
        except NotKept as exc:
            assert self.keep is not None
            raise MintRejected(
                f"oauth {self.name}: {self.settings.host} rotated the refresh token but its successor could not be"
                f" written to {self.keep.where} ({exc.why}); the operator must put a new one there",
                self._credential(request, context, exc.answer),
            ) from None
        credential = self._credential(request, context, answer)
        problem = _problem(request, answer)
        if problem:  # the core revokes it (one path for every provider), never handed out
            raise MintRejected(
                f"oauth {self.name}: {self.settings.host} returned an access token but {problem}", credential
            )
        return credential

    def _credential(self, request: OAuthRequest, context: MintContext, answer: TokenAnswer) -> MintedCredential:
        now = datetime.now(UTC)
        lived = answer.expires_in if answer.expires_in is not None and answer.expires_in > 0 else LIFETIME
        token_end = now + timedelta(seconds=lived)
        expires_at = min(token_end, aware(context.session_expires_at), now + timedelta(seconds=context.ttl))
        token = answer.access_token
        return MintedCredential(
            reference={
                "token_url": self.settings.token_url,
                "grant": self.settings.grant.value,
                # the server's own end of the token (whole seconds, rounded up): live until then unless revoked
                "token_expires_at": iso(token_end + timedelta(microseconds=999_999)),
            },
            secret=token,
            files={"token": token},
            expires_at=expires_at,
            scope=request.scope(),
            revoke_secret=token if self.settings.revocation_url is not None else None,
        )

    def revoke(self, target: RevokeTarget, now: datetime) -> RevokeOutcome:
        end = self._token_end(target)
        if end is not None and aware(now) >= end:
            return RevokeOutcome.EXPIRED
        if self.settings.revocation_url is None:
            return RevokeOutcome.VALID_UNTIL_EXPIRY
        if target.revoke_secret is None:  # the keep-safe was lost (a reboot): only the token's end ends it
            until = iso(end) if end is not None else "its end at the server"
            raise ProviderError(
                f"oauth {self.name}: no token kept for {target.name}, so it cannot be revoked; it stays valid"
                f" until {until}",
                retryable=False,
            )
        try:
            self.endpoints.revoke(target.revoke_secret, "access_token")
        except Refused as exc:
            raise ProviderError(
                f"oauth {self.name}: token revoke for {target.name} refused ({exc.said()})",
                retryable=exc.status >= 500 or exc.status == 429,
            ) from None
        return RevokeOutcome.REVOKED

    def _token_end(self, target: RevokeTarget) -> datetime | None:
        """When the token ends at the server: as recorded at minting, else an hour after its ``expires_at``."""
        recorded = parse_time(target.reference.get("token_expires_at"))
        if recorded is not None:
            return recorded
        if target.expires_at is None:
            return None
        return aware(target.expires_at) + timedelta(seconds=LIFETIME)

    def health(self) -> list[Check]:
        return oauth_health(self.name, self.settings, self.endpoints, self.keep, self.grant, self.in_fleet)

    def close(self) -> None:
        self.endpoints.close()


def _problem(request: OAuthRequest, answer: TokenAnswer) -> str:
    """Why the token is not what the broker hands out, or "" when it is."""
    if answer.token_type.lower() != "bearer":
        return f"its token_type is {answer.token_type[:20]!r}, not Bearer"
    if answer.expires_in is None or answer.expires_in <= 0:
        return "it does not say when it ends (expires_in)"
    if answer.expires_in > LIFETIME:
        return f"it lives {answer.expires_in} s, longer than the {LIFETIME} s the broker can bound after a crash"
    extra = [scope for scope in answer.scope or () if scope not in request.scopes]
    if extra:
        return f"its scope holds more than was asked ({', '.join(extra)[:200]})"
    return ""


def _resource(host: str) -> str:
    name, _, port = host.rpartition(":")
    return f"https://{name}" + ("" if port == "443" else f":{port}")
