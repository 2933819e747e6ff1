"""``web_identity = true``: AWS trusts the broker's issuer, so no AWS key exists on the broker's host.

Each session's role is assumed with ``AssumeRoleWithWebIdentity`` and a token
the broker's issuer signs for that session (``sub``
``task:TASK:session:ID``, ``aud`` ``web_identity_audience``; AWS's
``source_identity`` and session ``tags`` claims carry what ``AssumeRole``
passes as parameters), so the role's trust policy names the issuer's IAM
OIDC provider and a condition on ``sub``. The call is unsigned: the token is
the proof. What the broker does in its own name (``GetRole``, the deny
policy of ``revoke = "deny-policy"``, doctor's ``GetCallerIdentity``) it does
as ``broker_role_arn``, assumed the same way with a token naming the broker
(``sub`` ``broker:HOST``), refreshed by botocore before it ends; without that
role (``revoke = "expire"``) the broker has no AWS identity at all, and the
botocore session looks for none (no profile, no environment, no instance
metadata). A refusal for the token's time is a clock AWS and this host
disagree on, said so with the fix. ``broker doctor`` fetches the issuer's
discovery document and JWKS as AWS does and checks that the signing key is
there; with ``broker_role_arn``, its ``GetCallerIdentity`` is the test login.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from broker.vocab.checks import Check
from broker.vocab.errors import ProviderError
from providers.base import MintContext
from providers.capabilities import TokenIssuer
from providers.federation import discovered_jwks, issuer_keys_check

DEFAULT_AUDIENCE = "sts.amazonaws.com"
#: The token only has to outlive the call; the session it buys lasts DurationSeconds.
TOKEN_LIFETIME = 300
#: The broker's own role: botocore asks for new keys this long before the old ones end.
BROKER_SESSION = 3600
#: How STS says a web identity token's time is wrong (expired, issued in the future, not valid yet).
TIME_REFUSAL = re.compile(r"expired|in the future|not (?:yet )?valid|before issued|\b(?:iat|exp|nbf)\b", re.IGNORECASE)
TIME_CODES = frozenset({"ExpiredTokenException", "InvalidIdentityToken"})
SOURCE_IDENTITY_CLAIM = "https://aws.amazon.com/source_identity"
TAGS_CLAIM = "https://aws.amazon.com/tags"


@dataclass
class WebIdentity:
    """The instance's federation: the audience its tokens name, the broker's own role, the issuer (handed over)."""

    audience: str = DEFAULT_AUDIENCE
    broker_role_arn: str | None = None
    issuer: TokenIssuer | None = None

    def signer(self, name: str) -> TokenIssuer:
        if self.issuer is None:
            raise ProviderError(f"aws {name}: web_identity needs the broker's issuer, which is not open")
        return self.issuer


def session_token_claims(source_identity: str, tags: list[dict[str, str]]) -> dict[str, Any]:
    """AWS's claims for what ``AssumeRole`` passes as ``SourceIdentity`` and ``Tags``."""
    return {
        SOURCE_IDENTITY_CLAIM: source_identity,
        TAGS_CLAIM: {"principal_tags": {tag["Key"]: [tag["Value"]] for tag in tags}, "transitive_tag_keys": []},
    }


def assume(sts: Any, name: str, web: WebIdentity, params: dict[str, Any], context: MintContext) -> Any:
    """``AssumeRoleWithWebIdentity`` with ``params`` (role, session name, duration, policies) and a token of the
    session; its ``SourceIdentity`` and ``Tags`` go into the token. The token's ``jti`` comes back beside the answer."""
    source_identity, tags = params.pop("SourceIdentity"), params.pop("Tags")
    claims = session_token_claims(source_identity, tags)
    signed = web.signer(name).session_token(
        context, web.audience, TOKEN_LIFETIME, purpose=f"aws {name} web identity", claims=claims
    )
    response = sts.assume_role_with_web_identity(WebIdentityToken=signed.token.reveal(), **params)
    return response, signed.jti


def time_refusal(name: str, error: ProviderError) -> ProviderError | None:
    """The one-line error for STS refusing a token for its time; None for any other refusal."""
    cause = error.__cause__
    response = getattr(cause, "response", None)
    code = str(((response or {}).get("Error") or {}).get("Code") or "") if isinstance(response, dict) else ""
    if code not in TIME_CODES or not TIME_REFUSAL.search(error.message):
        return None
    return ProviderError(
        f"aws {name}: AssumeRoleWithWebIdentity refused the broker's token for its time ({code}): this host's"
        " clock and AWS's disagree; synchronise this host's clock (chrony, systemd-timesyncd)",
        retryable=False,
    )


def broker_credentials(session: Any, web: WebIdentity, name: str, create: Any) -> None:
    """Make ``session`` (botocore's) find the broker's own keys only as ``broker_role_arn`` (none without it)."""
    from botocore.credentials import (
        AssumeRoleWithWebIdentityCredentialFetcher,
        CredentialProvider,
        CredentialResolver,
        DeferredRefreshableCredentials,
    )

    providers: list[Any] = []
    if web.broker_role_arn is not None:
        role_arn = web.broker_role_arn

        def token() -> str:
            signed = web.signer(name).broker_token(web.audience, TOKEN_LIFETIME, purpose=f"aws {name} broker role")
            return signed.token.reveal()

        fetcher = AssumeRoleWithWebIdentityCredentialFetcher(
            create,
            token,
            role_arn,
            extra_args={"RoleSessionName": f"broker-{name}", "DurationSeconds": BROKER_SESSION},
        )

        class BrokerRole(CredentialProvider):  # type: ignore[misc]
            METHOD = "broker-web-identity"

            def load(self) -> Any:
                return DeferredRefreshableCredentials(fetcher.fetch_credentials, self.METHOD)

        providers.append(BrokerRole())
    session.register_component("credential_provider", CredentialResolver(providers))


def unsigned_creator(region: str, endpoint_url: str | None) -> Any:
    """What the broker role's fetcher makes its STS client with: a session that looks for no keys at all."""
    import botocore.session
    from botocore.credentials import CredentialResolver

    bare = botocore.session.Session()
    bare.register_component("credential_provider", CredentialResolver([]))
    return functools.partial(bare.create_client, region_name=region, endpoint_url=endpoint_url)


def web_identity_checks(name: str, web: WebIdentity, timeout: float) -> list[Check]:
    """What AWS fetches from the issuer (its discovery document, then its JWKS) holds the signing key."""
    issuer = web.signer(name)
    fix = (
        "serve the issuer's documents at its URL (broker serve with [gateway]) so AWS can fetch them, and register"
        " the issuer as an IAM OIDC provider (docs/identity.md)"
    )

    def fetch() -> dict[str, Any]:
        return discovered_jwks(issuer.issuer, timeout=timeout)[1]

    where = f"{issuer.issuer}/.well-known/openid-configuration's JWKS"
    return [issuer_keys_check("web_identity.keys", where, fetch, issuer.public_keys(), fix)]
