"""``broker doctor``'s checks of an ``oauth`` instance: its token endpoint, the clock, and what it gets tokens with.

Doctor mints nothing and changes nothing at the authorisation server, so it
never tries the refresh token: a refresh would rotate it (and, raced by a
session's refresh, could even look like its reuse). It checks that the token
is there and readable and, when the instance names an ``introspection_url``,
asks the server whether it is still active (RFC 7662: nothing changes, the
server only looks). The endpoint check is a ``GET`` of the token endpoint
without credentials: any HTTP answer over verified TLS means reachable (a
token endpoint answers ``GET`` with 405 or 400). A JWT bearer key is checked
by signing an assertion that is never sent; client credentials are not tried
(a token would be minted).
"""

from __future__ import annotations

import time

from broker.vocab.checks import Check
from broker.vocab.errors import BrokerError
from providers.clock import clock_check
from providers.oauth.endpoint import Endpoints, Refused
from providers.oauth.grants import JwtBearer, Obtaining
from providers.oauth.keep import Keep
from providers.oauth.settings import OAuthSettings


def oauth_health(
    name: str, settings: OAuthSettings, endpoints: Endpoints, keep: Keep | None, grant: Obtaining, in_fleet: bool
) -> list[Check]:
    import requests

    fix = f"check token_url and ca_file in [providers.{name}]"
    try:
        response = endpoints.session().get(
            settings.token_url, timeout=settings.timeout, allow_redirects=False, stream=True
        )
        response.close()
    except requests.exceptions.SSLError:
        return [Check("token_endpoint", False, f"TLS with {settings.host} failed: certificate not trusted", fix)]
    except requests.exceptions.RequestException as exc:
        return [Check("token_endpoint", False, f"{settings.token_url} cannot be reached ({type(exc).__name__})", fix)]
    received = time.time()
    checks = [
        Check("token_endpoint", True, f"{settings.token_url} answers over verified TLS (HTTP {response.status_code})")
    ]
    clock = clock_check(response.headers.get("Date"), received, f"oauth {settings.host}")
    if clock is not None:
        checks.append(clock)
    try:
        if endpoints.client_secret() is not None:
            checks.append(Check("client_secret", True, "readable, mode 0600"))
    except BrokerError as exc:
        checks.append(Check("client_secret", False, exc.message))
    if keep is not None:
        checks.append(_refresh_token(name, settings, endpoints, keep, in_fleet))
    if isinstance(grant, JwtBearer):
        try:
            grant.sign()
            checks.append(Check("assertion", True, f"assertion_key_file signs {settings.assertion.algorithm}"))  # type: ignore[union-attr]
        except BrokerError as exc:
            checks.append(Check("assertion", False, exc.message))
    return checks


def _refresh_token(name: str, settings: OAuthSettings, endpoints: Endpoints, keep: Keep, in_fleet: bool) -> Check:
    fix = f"put the operator's refresh token in {keep.where} (README: the oauth provider)"
    if in_fleet and not keep.shared:
        return Check(
            "refresh_token", False, "a fleet's hosts cannot share refresh_token_file", "use refresh_token_vault"
        )
    try:
        kept = keep.read()
    except BrokerError as exc:
        return Check("refresh_token", False, exc.message, fix)
    if settings.introspection_url is None:
        return Check(
            "refresh_token",
            True,
            f"present in {keep.where}; not tried (a refresh would rotate it; introspection_url lets the server"
            " say whether it is active)",
        )
    try:
        facts = endpoints.introspect(kept.value, "refresh_token")
    except Refused as exc:
        return Check("refresh_token", False, f"the introspection endpoint refused ({exc.said()})", fix)
    except BrokerError as exc:
        return Check("refresh_token", False, exc.message)
    if not facts.get("active"):
        return Check(
            "refresh_token", False, f"{settings.host} says the refresh token in {keep.where} is not active", fix
        )
    ends = facts.get("exp")
    until = f", until {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(ends))}" if isinstance(ends, int) else ""
    return Check("refresh_token", True, f"{settings.host} says the refresh token in {keep.where} is active{until}")
