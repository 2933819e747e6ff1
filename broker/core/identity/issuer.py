"""The broker's issuer: signs a session's token or its own, publishes its keys, rotates them.

``Issuer`` is the ``providers.capabilities.TokenIssuer`` the core hands the
providers that sign (``UsesIssuer``: the ``identity`` type's session tokens,
AWS web identity, Vault's jwt login, token exchange). A token is signed by
pyjwt (``jwt.api_jws``), with the file key (``broker.core.identity.keys``) or
through Vault's transit engine (``broker.core.identity.transit``); its claims
are the issuer's alone (``iss``, ``sub``, ``aud``, ``iat``, ``exp``, ``jti``
and, for a session, ``task``, ``session``, ``rule``, ``requester``,
``sandbox_uid``, ``parent``): a provider's own claims may add to them, never
replace one. ``exp`` is at most an hour after ``iat`` and never past the
session's end. Each token signed for another purpose than a credential of its
own is an ``identity.token`` record (its ``jti``, never the token).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from broker.core.identity.keys import FileKeyRing
from broker.core.identity.transit import TransitKeyRing, transit_algorithm
from broker.vocab.errors import ConfigError, ProviderError
from broker.vocab.secret import Secret
from broker.vocab.time import iso, utcnow
from providers.base import MintContext
from providers.capabilities import MAX_TOKEN_LIFETIME, SignedToken, TokenIssuer, TransitSigning

if TYPE_CHECKING:
    from broker.audit.log import AppendLog
    from broker.core.inputs.config import Config
    from broker.core.inputs.identity import IdentityConfig

#: The claims the issuer sets; a provider's own claims may not name one of them.
ISSUER_CLAIMS = frozenset(
    {"iss", "sub", "aud", "iat", "nbf", "exp", "jti", "task", "session", "rule", "requester", "sandbox_uid", "parent"}
)
#: A credential's token is logged as the credential it is (``credential.issued``, its reference holds the ``jti``).
CREDENTIAL = "credential"


def session_subject(task: str, session: str) -> str:
    return f"task:{task}:session:{session}"


class Issuer(TokenIssuer):
    """The issuer of ``settings`` on the host ``host`` (``sub`` ``broker:HOST`` for its own tokens)."""

    def __init__(
        self,
        settings: IdentityConfig,
        host: str,
        ring: FileKeyRing | TransitKeyRing,
        log: AppendLog | None,
        requester: str,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.settings = settings
        self.host = host
        self.ring = ring
        self.log = log  # None: a process with no issuance log yet (doctor on a new installation) logs nothing
        self.requester = requester
        self.clock = clock

    @classmethod
    def of(cls, config: Config, log: AppendLog | None, requester: str) -> Issuer:
        """The issuer ``config`` declares (it has ``[identity]``), logging to ``log``."""
        settings = config.identity
        assert settings is not None
        ring: FileKeyRing | TransitKeyRing
        if settings.transit_key is None:
            ring = FileKeyRing(settings.signing_key_file, settings.algorithm)
        else:
            assert settings.transit_vault is not None  # the config names it, or its one vault instance
            provider = config.providers[settings.transit_vault]
            assert isinstance(provider, TransitSigning)
            ring = TransitKeyRing(provider, settings.transit_vault, settings.transit_mount, settings.transit_key)
        return cls(settings, config.host, ring, log, requester)

    @property
    def issuer(self) -> str:
        return self.settings.issuer

    @property
    def algorithm(self) -> str:
        return self.ring.current().algorithm if isinstance(self.ring, FileKeyRing) else self.ring.algorithm

    def session_token(
        self,
        context: MintContext,
        audience: str,
        lifetime: int,
        *,
        purpose: str,
        claims: Mapping[str, Any] | None = None,
    ) -> SignedToken:
        session: dict[str, Any] = {
            "task": context.task,
            "session": context.session_id,
            "rule": context.rule,
            "requester": context.requester,
            "sandbox_uid": context.sandbox_uid,
        }
        if context.parent is not None:
            session["parent"] = context.parent
        subject = session_subject(context.task, context.session_id)
        return self._sign(
            subject,
            audience,
            lifetime,
            {**dict(claims or {}), **session},
            until=context.session_expires_at,
            purpose=purpose,
            record={"session": context.session_id, "task": context.task, "requester": context.requester},
            extra=claims,
        )

    def broker_token(self, audience: str, lifetime: int, *, purpose: str) -> SignedToken:
        record = {"session": None, "task": None, "requester": self.requester}
        return self._sign(f"broker:{self.host}", audience, lifetime, {}, until=None, purpose=purpose, record=record)

    def public_keys(self) -> dict[str, Any]:
        return {"keys": self.ring.jwks(self.clock())}

    def rotate(self) -> tuple[str, str]:
        """A new signing key; the old one is published until its last token ends. (old, new) ``kid``."""
        return self.ring.rotate(self.clock())

    def _sign(
        self,
        subject: str,
        audience: str,
        lifetime: int,
        claims: dict[str, Any],
        *,
        until: datetime | None,
        purpose: str,
        record: dict[str, Any],
        extra: Mapping[str, Any] | None = None,
    ) -> SignedToken:
        clashing = sorted(ISSUER_CLAIMS & set(extra or {}))
        if clashing:
            raise ProviderError(f"identity: a provider may not set the issuer's claim {clashing[0]!r}", retryable=False)
        now = self.clock().replace(microsecond=0)
        ends = now + timedelta(seconds=min(lifetime, MAX_TOKEN_LIFETIME))
        if until is not None:
            ends = min(ends, until.replace(microsecond=0))
        if ends <= now:
            raise ProviderError(f"identity: no token for {subject}: its session has ended", retryable=False)
        jti = secrets.token_hex(16)
        payload = {
            "iss": self.issuer,
            "sub": subject,
            "aud": audience,
            "iat": int(now.timestamp()),
            "exp": int(ends.timestamp()),
            "jti": jti,
            **claims,
        }
        token, kid = self._encode(json.dumps(payload, separators=(",", ":")).encode())
        signed = SignedToken(Secret(token), jti, kid, subject, audience, now, ends)
        if purpose != CREDENTIAL and self.log is not None:
            self.log.append(
                "identity.token",
                **record,
                jti=jti,
                kid=kid,
                subject=subject,
                audience=audience,
                expires_at=iso(ends),
                purpose=purpose,
            )
        return signed

    def _encode(self, payload: bytes) -> tuple[str, str]:
        """The compact JWS of ``payload`` (pyjwt's) and the id of the key that signed it."""
        from jwt.api_jws import PyJWS

        if isinstance(self.ring, FileKeyRing):
            key = self.ring.current()
            jws = PyJWS(algorithms=[key.algorithm])
            token = jws.encode(payload, key.private_key, key.algorithm, headers={"kid": key.kid, "typ": "JWT"})
            return token, key.kid
        algorithm, kid, handle = self.ring.signing()
        jws = PyJWS(algorithms=[])
        jws.register_algorithm(algorithm, transit_algorithm(algorithm))
        token = jws.encode(payload, handle, algorithm, headers={"kid": kid, "typ": "JWT"})  # type: ignore[arg-type]
        return token, kid


def check_issuer_key(issuer: Issuer) -> str:
    """What signs (for ``doctor``): the key's id and algorithm; a ``ConfigError`` naming the fix when it cannot."""
    if isinstance(issuer.ring, FileKeyRing):
        key = issuer.ring.current()
        return f"{issuer.ring.path} ({key.algorithm}, kid {key.kid}, {len(key.retired)} retired)"
    algorithm, kid, handle = issuer.ring.signing()
    try:
        handle.provider.transit_sign(handle.mount, handle.name, handle.version, b"doctor", rsa=handle.rsa)
    except ProviderError as exc:
        raise ConfigError(exc.message) from None
    where = f"{issuer.ring.instance}:{issuer.ring.mount}/keys/{issuer.ring.name}"
    return f"transit key {where} version {handle.version} ({algorithm}, kid {kid}) signs"
