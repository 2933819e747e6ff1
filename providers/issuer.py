"""The broker as an OpenID Connect issuer, as a provider sees it: the tokens it signs and the keys it signs with.

Two capabilities of ``providers.capabilities`` live here because they share one vocabulary: ``UsesIssuer`` (a
provider whose credentials are session tokens, or that logs in or federates with one) and ``TransitSigning`` (a
provider that keeps the issuer's key and signs with it, Vault's transit engine). The core implements
``TokenIssuer`` (``broker.core.identity.issuer``) and hands it over when the broker opens.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from broker.vocab.secret import Secret
from providers.base import MintContext

#: The longest a token of the broker's issuer lives (an hour): a session longer than that gets new ones.
MAX_TOKEN_LIFETIME = 3600


@dataclass(frozen=True)
class SignedToken:
    """A JWT the broker's issuer signed: the token (whoever holds it speaks for its subject) and what may be said of it
    (the ``jti`` is what the log records, never the token)."""

    token: Secret
    jti: str
    kid: str
    subject: str
    audience: str
    issued_at: datetime
    expires_at: datetime


class TokenIssuer(ABC):
    """The broker as an OpenID Connect issuer (``[identity] issuer``), as the core hands it to a provider.

    A session's token names the session (``sub`` ``task:TASK:session:ID``, and the claims ``task``, ``session``,
    ``rule``, ``requester``, ``sandbox_uid``, ``parent``); the broker's own names the broker (``sub``
    ``broker:HOST``), for a login of its own. Neither lives longer than ``MAX_TOKEN_LIFETIME``, nor a session's
    past its end. Each token signed for any ``purpose`` but ``credential`` is an ``identity.token`` record of the
    issuance log (its ``jti``, never the token); a ``credential`` token is logged as the credential it is.
    """

    @property
    @abstractmethod
    def issuer(self) -> str:
        """The issuer URL (``iss``)."""

    @abstractmethod
    def session_token(
        self,
        context: MintContext,
        audience: str,
        lifetime: int,
        *,
        purpose: str,
        claims: Mapping[str, Any] | None = None,
    ) -> SignedToken:
        """A token of ``context``'s session for ``audience``, ending after ``lifetime`` seconds at most; ``claims``
        adds claims of the provider's own (AWS's session tags), never one of the issuer's."""

    @abstractmethod
    def broker_token(self, audience: str, lifetime: int, *, purpose: str) -> SignedToken:
        """A token naming the broker itself, for ``audience``: a login of its own (Vault's jwt auth method)."""

    @abstractmethod
    def public_keys(self) -> dict[str, Any]:
        """The JSON Web Key Set: every key a token still alive may be signed with, the current one first."""


@runtime_checkable
class UsesIssuer(Protocol):
    """Signs with the broker's issuer: its credentials are tokens of it, or it logs in or federates with one."""

    @property
    def issuer_needed(self) -> str | None:
        """What of its table needs ``[identity] issuer`` (``web_identity``; ``type`` for a type that always does),
        None when this instance signs nothing; the config refuses it without ``[identity]``, naming it."""

    def use_issuer(self, issuer: TokenIssuer) -> None:
        """The broker's issuer, handed over once the broker opens (before any mint, login or health check)."""


@dataclass(frozen=True)
class TransitKey:
    """A signing key kept in Vault's transit engine, as Vault describes it: its type, its newest version, and each
    version's public key (PEM) with the time it was made (a version is retired when the next one is made)."""

    name: str
    type: str
    latest: int
    versions: Mapping[int, tuple[str, datetime]]


@runtime_checkable
class TransitSigning(Protocol):
    """Signs with a key that never leaves the provider (Vault's transit engine, at ``mount``): the issuer's key."""

    def transit_key(self, mount: str, name: str) -> TransitKey:
        """The key ``name``'s versions and public keys (``ProviderError`` when it cannot be read)."""

    def transit_sign(self, mount: str, name: str, version: int, data: bytes, *, rsa: bool) -> bytes:
        """The raw signature of ``data`` by version ``version`` (ECDSA as JWS wants it, r and s; RSA PKCS#1 v1.5),
        with SHA-256; ``ProviderError`` naming the fix when the key cannot sign."""

    def transit_rotate(self, mount: str, name: str) -> None:
        """A new version of the key, which signs from now on."""
