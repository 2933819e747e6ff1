"""The issuer's public answers: ``GET`` of its discovery document, its JWKS and its revocation list.

One function, ``answer``, takes the request's path and answers it as the
bytes a verifier reads (JSON, with how long it may be cached), or None for a
path that is not one of them; any listener that serves the issuer (the
daemon's socket, a gateway's TCP listener, a test's small server) hands its
``GET`` here. A path is the well-known name, or the same under the issuer
URL's own path (``https://host/tenant`` serves ``/tenant/.well-known/...``).
Nothing here reads the request otherwise: these documents are public.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.core.identity.documents import DISCOVERY, JWKS, REVOKED, discovery, jwks, path_prefix, revoked

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime
    from typing import Any

    from broker.core.identity.issuer import Issuer
    from broker.core.store.interface import Records

PATHS = (DISCOVERY, JWKS, REVOKED)
#: How long a verifier may keep each: keys are published an hour past their last use, so minutes are safe; the
#: revocation list is read fresh.
CACHE = {DISCOVERY: "public, max-age=300", JWKS: "public, max-age=300", REVOKED: "no-store"}


@dataclass(frozen=True)
class WellKnown:
    """One answer: status 200, a JSON body, its ``Content-Type`` and ``Cache-Control``."""

    body: bytes
    cache_control: str
    content_type: str = "application/json"
    status: int = 200


def document(issuer: Issuer, providers: Mapping[str, Any], store: Records, path: str, now: datetime) -> Any:
    """The document ``path`` names (one of ``PATHS``)."""
    if path == DISCOVERY:
        return discovery(issuer)
    if path == JWKS:
        return jwks(issuer)
    return revoked(issuer, providers, store, now)


def answer(issuer: Issuer, providers: Mapping[str, Any], store: Records, path: str, now: datetime) -> WellKnown | None:
    """The answer to ``GET path`` (its query already cut off), or None when it is not the issuer's."""
    prefix = path_prefix(issuer)
    name = path[len(prefix) :] if prefix and path.startswith(prefix + "/") else path
    if name not in PATHS:
        return None
    body = json.dumps(document(issuer, providers, store, name, now), separators=(",", ":")).encode()
    return WellKnown(body, CACHE[name])
