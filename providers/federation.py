"""What every provider that trusts the broker's issuer shares: the keys a verifier would fetch, compared with ours.

A provider that verifies the broker's tokens reads its keys from somewhere:
the issuer's discovery document and the JWKS it names (AWS's IAM OIDC
provider, Vault's ``oidc_discovery_url``), a JWKS URL (Vault's
``jwks_url``), or keys uploaded once (Vault's ``jwt_validation_pubkeys``, a
model provider's console). ``broker doctor`` fetches what the provider would
fetch (``fetch_jwks``, ``discovered_jwks``) and checks that the key the
issuer signs with now is among them, with the same public key
(``jwks_check``); a retired key missing there only fails tokens already
signed, and is said so.
"""

from __future__ import annotations

from typing import Any

from broker.vocab.checks import Check
from broker.vocab.errors import BrokerError, ProviderError

#: The public members of a JWK that make the key (RFC 7517/7518): compared, never ``kid`` alone.
KEY_MEMBERS = ("kty", "crv", "x", "y", "n", "e")


def fetch_json(url: str, *, timeout: float, ca_file: str | None = None) -> dict[str, Any]:
    """GET ``url``'s JSON document (``ProviderError`` naming the URL when it cannot be read)."""
    import requests

    try:
        answer = requests.get(url, timeout=timeout, verify=ca_file or True)
        answer.raise_for_status()
        document = answer.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderError(f"cannot read {url}: {type(exc).__name__}") from None
    if not isinstance(document, dict):
        raise ProviderError(f"{url} is not a JSON object")
    return document


def discovered_jwks(issuer: str, *, timeout: float, ca_file: str | None = None) -> tuple[str, dict[str, Any]]:
    """The JWKS a verifier finds from ``issuer`` (its discovery document's ``jwks_uri``), and that URI."""
    discovery = fetch_json(issuer + "/.well-known/openid-configuration", timeout=timeout, ca_file=ca_file)
    if discovery.get("issuer") != issuer:
        raise ProviderError(f"the discovery document at {issuer} names issuer {str(discovery.get('issuer'))[:80]!r}")
    uri = discovery.get("jwks_uri")
    if not isinstance(uri, str):
        raise ProviderError(f"the discovery document at {issuer} names no jwks_uri")
    return uri, fetch_json(uri, timeout=timeout, ca_file=ca_file)


def same_key(one: dict[str, Any], other: dict[str, Any]) -> bool:
    return all(one.get(member) == other.get(member) for member in KEY_MEMBERS)


def jwks_check(name: str, where: str, fetched: dict[str, Any], ours: dict[str, Any], fix: str) -> Check:
    """Whether ``fetched`` (what the provider reads at ``where``) holds the key the issuer signs with now."""
    keys = [key for key in fetched.get("keys") or [] if isinstance(key, dict)]
    current, *retired = ours["keys"]
    if not any(same_key(key, current) for key in keys):
        return Check(name, False, f"{where} does not hold the issuer's signing key {current['kid']}", fix)
    missing = [key["kid"] for key in retired if not any(same_key(found, key) for found in keys)]
    note = f"; retired key(s) {', '.join(missing)} missing (tokens they signed fail there)" if missing else ""
    return Check(name, True, f"{where} holds the signing key {current['kid']}{note}")


def issuer_keys_check(name: str, where: str, fetch: Any, ours: dict[str, Any], fix: str) -> Check:
    """``jwks_check`` of what ``fetch()`` returns; a fetch that fails is the failed check."""
    try:
        fetched = fetch()
    except BrokerError as exc:
        return Check(name, False, exc.message, fix)
    return jwks_check(name, where, fetched, ours, fix)
