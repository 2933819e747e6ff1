"""What the issuer publishes: its discovery document, its keys and the tokens of revoked sessions.

``discovery`` is the OpenID Connect discovery document verifiers read at
``ISSUER/.well-known/openid-configuration`` (AWS's IAM OIDC provider, Vault's
``oidc_discovery_url``); it names the JWKS at ``/.well-known/jwks.json`` and
the revocation list at ``/.well-known/revoked``. ``revoked`` lists, by
``jti``, each token of the issuer still alive whose session is no longer
live (revoked or being revoked, or ended before its token): from the store, so every host of
a fleet publishes the same list. A token renewed in a live session is not in
it: it ends as its successor begins, like a projected token. The short life
of every token is the main bound; the list lets a verifier cut one off
sooner.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from broker.core.identity.issuer import Issuer
from broker.core.store.interface import Records
from broker.core.store.states import SessionState
from broker.vocab.errors import ConfigError
from broker.vocab.time import iso

DISCOVERY = "/.well-known/openid-configuration"
JWKS = "/.well-known/jwks.json"
REVOKED = "/.well-known/revoked"
#: A session in these states has not been revoked: its tokens are not listed (one being revoked is).
NOT_REVOKED = (SessionState.ISSUING, SessionState.ACTIVE)
#: The claims a session's token carries (the discovery document lists them).
CLAIMS = ("iss", "sub", "aud", "iat", "exp", "jti", "task", "session", "rule", "requester", "sandbox_uid", "parent")


def required(issuer: Issuer | None) -> Issuer:
    """The broker's issuer; ``[identity] issuer`` names it, or this is a one-line error saying so."""
    if issuer is None:
        raise ConfigError('this broker is no issuer: set [identity] issuer = "https://..." in its config')
    return issuer


def discovery(issuer: Issuer) -> dict[str, Any]:
    """The discovery document, for the issuer URL (or to upload where a provider takes keys directly)."""
    base = issuer.issuer
    return {
        "issuer": base,
        "jwks_uri": base + JWKS,
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": [issuer.algorithm],
        "claims_supported": list(CLAIMS),
        "revocation_list_uri": base + REVOKED,
    }


def jwks(issuer: Issuer) -> dict[str, Any]:
    return issuer.public_keys()


def revoked(issuer: Issuer, providers: Mapping[str, Any], store: Records, now: datetime) -> dict[str, Any]:
    """The ``jti`` of each token of ``providers``' still alive whose session is not live, earliest end first."""
    live: dict[str, bool] = {}
    found: list[tuple[datetime, str]] = []
    for name, provider in providers.items():
        if not provider.revoked_by_jti:
            continue
        for record in store.live_credentials(name, now):
            jti = record.reference.get("jti", "")
            if not jti or record.expires_at is None:
                continue
            if record.session_id not in live:
                session = store.get_session(record.session_id)
                live[record.session_id] = session is not None and session.state in NOT_REVOKED
            if not live[record.session_id]:
                found.append((record.expires_at, jti))
    found.sort()
    entries = [{"jti": jti, "exp": int(ends.timestamp())} for ends, jti in found]
    return {"issuer": issuer.issuer, "generated_at": iso(now), "revoked": entries}


def path_prefix(issuer: Issuer) -> str:
    """The issuer URL's path (``/tenant`` for ``https://host/tenant``): where its well-known documents live."""
    return urlsplit(issuer.issuer).path.rstrip("/")
