"""How the broker gets one access token from what the operator gave it: a refresh token, the client's own
credentials, or a JWT bearer assertion (RFC 7523) it signs.

A refresh (``RefreshGrant``) runs inside the token's single flight
(``providers.oauth.flight``): the kept token is read, sent, and the one the
server rotates it to is written back before the flight ends, so the next
refresh, in this process or another, presents the token the server expects.
A rotated token that cannot be written back is ``NotKept``: the access token
came with it, and the provider hands it to the core to be revoked at once.
The server's refusals become one-line errors naming what to fix: a refresh
token it no longer honours (``invalid_grant``) or a client it does not know
is the operator's configuration (exit 2), anything else the provider's
failure (exit 4). The assertion is signed with pyjwt, never by hand.
"""

from __future__ import annotations

import secrets
import time
from typing import Protocol

from broker.vocab.errors import BrokerError, ConfigError, ProviderError
from broker.vocab.secret import read_secret_file
from providers.oauth.endpoint import Endpoints, Form, Refused, TokenAnswer
from providers.oauth.flight import RefreshFlight
from providers.oauth.keep import Keep
from providers.oauth.settings import Assertion

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ASSERTION_LIFETIME = 120  # seconds: one use, right away


class Obtaining(Protocol):
    def obtain(self, asked: Form) -> TokenAnswer:
        """An access token for ``asked`` (its ``scope`` and ``resource`` fields)."""


class NotKept(Exception):
    """The server rotated the refresh token, and its successor could not be written back."""

    def __init__(self, answer: TokenAnswer, why: str) -> None:
        super().__init__(why)
        self.answer = answer
        self.why = why


class RefreshGrant:
    def __init__(self, endpoints: Endpoints, keep: Keep, flight: RefreshFlight) -> None:
        self.endpoints = endpoints
        self.keep = keep
        self.flight = flight

    def obtain(self, asked: Form) -> TokenAnswer:
        with self.flight.held():
            kept = self.keep.read()
            form = [("grant_type", "refresh_token"), ("refresh_token", kept.value.reveal()), *asked]
            try:
                answer = self.endpoints.token(form, [kept.value])
            except Refused as exc:
                raise refusal(self.endpoints, exc, f"the refresh token in {self.keep.where}") from None
            successor = answer.refresh_token
            if successor is not None and successor != kept.value:
                try:
                    self.keep.write(successor, kept.version)  # False: the operator's new one stays
                except (BrokerError, OSError) as exc:
                    why = exc.message if isinstance(exc, BrokerError) else type(exc).__name__
                    raise NotKept(answer, why) from None
        return answer


class ClientCredentials:
    def __init__(self, endpoints: Endpoints) -> None:
        self.endpoints = endpoints

    def obtain(self, asked: Form) -> TokenAnswer:
        try:
            return self.endpoints.token([("grant_type", "client_credentials"), *asked])
        except Refused as exc:
            raise refusal(self.endpoints, exc, "the client's credentials") from None


class JwtBearer:
    def __init__(self, endpoints: Endpoints, assertion: Assertion) -> None:
        self.endpoints = endpoints
        self.assertion = assertion

    def sign(self) -> str:
        """A fresh assertion: ``iss``, ``sub``, ``aud``, ``iat``, ``exp`` and a ``jti`` used once."""
        import jwt

        claim = self.assertion
        name = self.endpoints.name
        key = read_secret_file(claim.key_file, f"providers.{name}.assertion_key_file")
        now = int(time.time())
        claims = {
            "iss": claim.issuer,
            "sub": claim.subject,
            "aud": claim.audience,
            "iat": now,
            "exp": now + ASSERTION_LIFETIME,
            "jti": secrets.token_urlsafe(18),
        }
        try:
            return jwt.encode(
                claims, key.reveal(), algorithm=claim.algorithm, headers={"kid": claim.key_id} if claim.key_id else None
            )
        except (ValueError, TypeError, jwt.exceptions.PyJWTError):
            raise ConfigError(
                f"providers.{name}.assertion_key_file: not a private key pyjwt signs {claim.algorithm} with"
            ) from None

    def obtain(self, asked: Form) -> TokenAnswer:
        form = [("grant_type", JWT_BEARER), ("assertion", self.sign()), *asked]
        try:
            return self.endpoints.token(form)
        except Refused as exc:
            raise refusal(self.endpoints, exc, "the JWT bearer assertion (assertion_*)") from None


def refusal(endpoints: Endpoints, refused: Refused, grant: str) -> BrokerError:
    """The one-line error of a token request the server refused."""
    name, host = endpoints.name, endpoints.settings.host
    said = refused.said()
    if refused.error == "invalid_grant":
        return ConfigError(
            f"providers.{name}: {host} refused {grant} ({said}): it is expired, revoked or was used already;"
            " the operator must put a new one there"
        )
    if refused.error in ("invalid_client", "unauthorized_client") or refused.status == 401:
        return ConfigError(
            f"providers.{name}: {host} refused the client {endpoints.settings.client_id!r} ({said}):"
            " check client_id and client_secret_file"
        )
    if refused.error == "invalid_scope":
        return ProviderError(f"oauth {name}: {host} refused the scopes asked ({said})", retryable=False)
    if refused.error == "invalid_target":
        return ProviderError(f"oauth {name}: {host} refused the resource asked ({said})", retryable=False)
    retry = refused.status >= 500 or refused.status == 429
    return ProviderError(f"oauth {name}: the token endpoint of {host} refused ({said})", retryable=retry)
