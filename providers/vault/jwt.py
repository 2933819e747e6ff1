"""``auth = "jwt"``: the broker logs in to Vault with a token its own issuer signs, so no Vault token file exists.

The login (``login``) sends a token naming the broker (``sub``
``broker:HOST``, ``aud`` ``jwt_audience``, five minutes) to the jwt auth
method at ``jwt_mount``, for the role ``jwt_role``; the role is bound to the
broker's issuer (``bound_issuer``, its keys in the method's config) and to
that subject. Vault refusing the token for its time (issued in the future,
expired, not yet valid) is a clock the two disagree on, said so with the fix.
``broker doctor`` checks that the keys the method verifies with hold the
issuer's signing key (``jwks_url``, ``oidc_discovery_url`` or
``jwt_validation_pubkeys``, read from the method's config) and that its
``bound_issuer`` is the broker's; the login itself is the test login.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.vocab.checks import Check
from broker.vocab.errors import ProviderError
from providers.capabilities import TokenIssuer
from providers.federation import discovered_jwks, fetch_json, issuer_keys_check, jwks_check

if TYPE_CHECKING:
    import hvac

LOGIN_LIFETIME = 300
#: How Vault (go-jose's claim checks) says a token's time is wrong.
TIME_REFUSAL = re.compile(r"\((?:iat|exp|nbf)\)|expired|in the future|not valid yet|before issued", re.IGNORECASE)


@dataclass(frozen=True)
class JwtLogin:
    role: str
    mount: str = "jwt"
    audience: str = "vault"


def login(client: hvac.Client, name: str, settings: JwtLogin, issuer: TokenIssuer | None) -> None:
    """Log ``client`` in with a fresh token of the broker's own; a refusal for its time names the clock."""
    import hvac.exceptions

    if issuer is None:
        raise ProviderError(f'vault {name}: auth = "jwt" needs the broker\'s issuer, which is not open')
    token = issuer.broker_token(settings.audience, LOGIN_LIFETIME, purpose=f"vault {name} login")
    try:
        client.auth.jwt.jwt_login(role=settings.role, jwt=token.token.reveal(), path=settings.mount)
    except hvac.exceptions.VaultError as exc:
        said = "; ".join(str(error) for error in (exc.errors or []))[:300] or type(exc).__name__
        if TIME_REFUSAL.search(said):
            raise ProviderError(
                f"vault {name}: jwt login refused for the token's time ({said}): this host's clock and Vault's"
                " disagree; synchronise this host's clock (chrony, systemd-timesyncd), or widen the role's"
                " clock_skew_leeway",
                retryable=False,
            ) from None
        message = f"vault {name}: jwt login as role {settings.role} at auth/{settings.mount} failed: {said}"
        raise ProviderError(message) from None


def jwt_checks(client: hvac.Client, name: str, settings: JwtLogin, issuer: TokenIssuer, timeout: float) -> list[Check]:
    """The method's keys and bound issuer against the broker's issuer (needs read on auth/MOUNT/config)."""
    fix = f"configure auth/{settings.mount} with the broker's keys: jwks_url or oidc_discovery_url = the issuer's"
    try:
        config: dict[str, Any] = client.auth.jwt.read_config(path=settings.mount).get("data") or {}
    except Exception as exc:  # hvac's and requests' errors alike: a failed line
        message = f"cannot read auth/{settings.mount}/config ({type(exc).__name__})"
        return [Check("jwt.keys", False, message, f"grant the broker read on auth/{settings.mount}/config")]
    checks = []
    bound = str(config.get("bound_issuer") or "")
    if config.get("oidc_discovery_url"):
        url = str(config["oidc_discovery_url"]).rstrip("/")
        checks.append(issuer_keys_check(
            "jwt.keys", f"{url}'s JWKS", lambda: discovered_jwks(url, timeout=timeout)[1], issuer.public_keys(), fix
        ))  # fmt: skip
        bound = bound or url
    elif config.get("jwks_url"):
        url = str(config["jwks_url"])
        fetch = lambda: fetch_json(url, timeout=timeout)  # noqa: E731
        checks.append(issuer_keys_check("jwt.keys", url, fetch, issuer.public_keys(), fix))
    else:
        checks.append(_pubkeys_check(list(config.get("jwt_validation_pubkeys") or []), issuer, settings.mount, fix))
    if bound != issuer.issuer:
        where = f"auth/{settings.mount}'s bound_issuer is {bound[:80]!r}"
        checks.append(Check("jwt.issuer", False, where, f"set bound_issuer = {issuer.issuer!r} there"))
    else:
        checks.append(Check("jwt.issuer", True, f"auth/{settings.mount} is bound to {issuer.issuer}"))
    return checks


def _pubkeys_check(pems: list[str], issuer: TokenIssuer, mount: str, fix: str) -> Check:
    """The method's ``jwt_validation_pubkeys`` (PEM) as JWKs, against the issuer's."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from jwt.algorithms import ECAlgorithm, RSAAlgorithm

    fetched: list[dict[str, Any]] = []
    for pem in pems:
        try:
            key = load_pem_public_key(str(pem).encode())
        except ValueError:
            continue  # a key that does not parse is not the issuer's
        if isinstance(key, ec.EllipticCurvePublicKey):
            fetched.append(ECAlgorithm.to_jwk(key, as_dict=True))
        elif isinstance(key, rsa.RSAPublicKey):
            fetched.append(RSAAlgorithm.to_jwk(key, as_dict=True))
    where = f"auth/{mount}'s jwt_validation_pubkeys"
    return jwks_check("jwt.keys", where, {"keys": fetched}, issuer.public_keys(), fix)
