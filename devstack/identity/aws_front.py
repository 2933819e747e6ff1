"""AssumeRoleWithWebIdentity as AWS does it, in front of moto, which does not check web identity tokens at all.

moto's ``AssumeRoleWithWebIdentity`` hands out a role's keys for any token,
or none: it reads neither the token, nor the account's IAM OIDC providers,
nor the role's trust policy (and it answers with a made-up
``AssumedRoleId``). ``WebIdentityFront`` wraps moto's WSGI application in
its own process (``python -m devstack.aws PORT --presigned ...``) and does
what AWS does before a role is assumed:

- the token's issuer (``iss``) must be an IAM OIDC provider of the account
  (moto keeps them: ``CreateOpenIDConnectProvider``); its keys are fetched
  as AWS fetches them, from ``ISSUER/.well-known/openid-configuration`` and
  the JWKS that names (plain http only for a loopback issuer, which AWS
  never takes: the stack's issuer is on loopback);
- the signature checks with the key its ``kid`` names, ``exp`` has not
  passed and ``iat`` is not in the future (no leeway), and ``aud`` is one of
  the provider's client ids;
- the role's trust policy has an Allow of ``sts:AssumeRoleWithWebIdentity``
  for that provider (``Principal.Federated``) whose conditions on
  ``PROVIDER:sub`` and ``PROVIDER:aud`` (``StringEquals``, ``StringLike``)
  the token meets, and ``DurationSeconds`` is within the role's
  ``MaxSessionDuration``.

A token that fails is refused with STS's own error (``InvalidIdentityToken``,
``ExpiredTokenException``, ``AccessDenied``, ``ValidationError``) and never
reaches moto. One that passes goes to moto, let through its IAM
authentication (the token is the call's proof; moto wants a signature), and
its answer's ``AssumedRoleId`` is the role's real id with the session name,
as AWS answers; the token's ``https://aws.amazon.com/source_identity`` is
kept for the session's key (``devstack.aws_iam.SOURCE_IDENTITIES``), as an
``AssumeRole``'s ``SourceIdentity`` is. Every decision is kept, and ``GET
/devstack-api/web-identity`` returns them (subject, role, allowed or why not).
"""

from __future__ import annotations

import fnmatch
import io
import json
import re
import secrets
import threading
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs, urlsplit
from xml.sax.saxutils import escape

from devstack.aws import Environ, StartResponse
from devstack.identity.aws_trust import DECISIONS

ACTION = "AssumeRoleWithWebIdentity"
#: What moto's authentication is told: this call's proof was the token, checked here.
VERIFIED = secrets.token_hex(16)
SOURCE_IDENTITY = "https://aws.amazon.com/source_identity"
ASSUMED_ID = re.compile(rb"<AssumedRoleId>[^<:]*:([^<]*)</AssumedRoleId>")
ASSUMED_KEY = re.compile(rb"<AccessKeyId>(ASIA[A-Z0-9]{12,124})</AccessKeyId>")


class Refused(Exception):
    def __init__(self, code: str, message: str, status: str = "400 Bad Request") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


def let_verified_calls_through() -> None:
    """moto's IAM authentication passes a web identity call the front verified (and only those)."""
    from moto.core.authorization import ActionAuthenticatorMixin

    original = ActionAuthenticatorMixin._authenticate_and_authorize_action

    def authenticate(self: Any, iam_request_cls: type, resource: str = "*") -> None:
        if self.headers.get("X-Devstack-Web-Identity") == VERIFIED and self._get_action() == ACTION:
            return
        original(self, iam_request_cls, resource)

    ActionAuthenticatorMixin._authenticate_and_authorize_action = authenticate  # type: ignore[method-assign]


class WebIdentityFront:
    """The WSGI middleware (see the module docstring)."""

    def __init__(self, app: Callable[[Environ, StartResponse], Iterable[bytes]], account: str) -> None:
        self.app = app
        self.account = account
        self.decisions: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        let_verified_calls_through()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        environ.pop("HTTP_X_DEVSTACK_WEB_IDENTITY", None)  # only the front says so
        if environ.get("PATH_INFO") == DECISIONS and environ.get("REQUEST_METHOD") == "GET":
            with self._lock:
                body = json.dumps(self.decisions).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        if environ.get("REQUEST_METHOD") != "POST" or environ.get("HTTP_AUTHORIZATION"):
            return self.app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        asked = {key: values[-1] for key, values in parse_qs(body.decode("latin-1")).items()}
        if asked.get("Action") != ACTION:
            return self.app(environ, start_response)
        try:
            role, claims = self.verify(asked)
        except Refused as refused:
            self._decided(asked, None, refused.code)
            return _error(start_response, refused)
        self._decided(asked, claims, "")
        environ["HTTP_X_DEVSTACK_WEB_IDENTITY"] = VERIFIED
        answered: list[Any] = []

        def keep(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            answered.extend((status, headers))
            return lambda data: None

        answer = b"".join(self.app(environ, keep))
        if answered and answered[0].startswith("200"):
            answer = ASSUMED_ID.sub(
                lambda m: b"<AssumedRoleId>" + role.id.encode() + b":" + m.group(1) + b"</AssumedRoleId>", answer
            )
            found = ASSUMED_KEY.search(answer)
            if found is not None and isinstance(claims.get(SOURCE_IDENTITY), str):
                from devstack.aws_iam import SOURCE_IDENTITIES

                SOURCE_IDENTITIES[found.group(1).decode()] = claims[SOURCE_IDENTITY]
        headers = [(k, v) for k, v in (answered[1] if answered else []) if k.lower() != "content-length"]
        start_response(
            answered[0] if answered else "500 Internal Server Error", [*headers, ("Content-Length", str(len(answer)))]
        )
        return [answer]

    def verify(self, asked: dict[str, str]) -> tuple[Any, dict[str, Any]]:
        """The role and the token's claims, when AWS would assume it; ``Refused`` as AWS refuses otherwise."""
        import jwt
        from moto.iam.models import iam_backends

        token = asked.get("WebIdentityToken", "")
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise Refused("InvalidIdentityToken", "Couldn't parse the web identity token") from None
        issuer = str(unverified.get("iss", ""))
        iam = iam_backends[self.account]["global"]
        provider_url = _provider_url(issuer)
        provider = next((p for p in iam.open_id_providers.values() if p.url == provider_url), None)
        if provider is None:
            raise Refused("InvalidIdentityToken", f"No OpenIDConnect provider found in your account for {issuer}")
        key = _signing_key(issuer, str(header.get("kid", "")))
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=["ES256", "RS256"],
                audience=list(provider.client_id_list),
                issuer=issuer,
                options={"require": ["exp", "iat", "sub", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise Refused("ExpiredTokenException", "Token expired: the web identity token's exp has passed") from None
        except jwt.ImmatureSignatureError:
            raise Refused(
                "InvalidIdentityToken", "Token issued in the future (iat): check the issuer's clock"
            ) from None
        except jwt.InvalidAudienceError:
            raise Refused("InvalidIdentityToken", "Incorrect token audience") from None
        except jwt.PyJWTError as exc:
            raise Refused(
                "InvalidIdentityToken", f"The web identity token is not valid: {type(exc).__name__}"
            ) from None
        role_arn = asked.get("RoleArn", "")
        role = next((r for r in iam.roles.values() if r.arn == role_arn), None)
        if role is None or not _trusted(
            json.loads(role.assume_role_policy_document), provider.arn, provider_url, claims
        ):
            raise Refused("AccessDenied", f"Not authorized to perform sts:{ACTION}", "403 Forbidden")
        if int(asked.get("DurationSeconds") or 3600) > int(role.max_session_duration or 3600):
            raise Refused(
                "ValidationError", "The requested DurationSeconds exceeds the MaxSessionDuration set for this role."
            )
        return role, claims

    def _decided(self, asked: dict[str, str], claims: dict[str, Any] | None, refused: str) -> None:
        with self._lock:
            self.decisions.append(
                {
                    "role": asked.get("RoleArn", ""),
                    "session_name": asked.get("RoleSessionName", ""),
                    "subject": (claims or {}).get("sub"),
                    "jti": (claims or {}).get("jti"),
                    "allowed": not refused,
                    "refused": refused,
                }
            )


def _provider_url(issuer: str) -> str:
    """How IAM names an OIDC provider: the issuer URL without its scheme."""
    parts = urlsplit(issuer)
    return parts.netloc + parts.path


def _signing_key(issuer: str, kid: str) -> Any:
    """The key ``kid`` of ``issuer``, fetched as AWS fetches it (discovery document, then its ``jwks_uri``)."""
    import jwt

    try:
        discovery = _fetch(issuer.rstrip("/") + "/.well-known/openid-configuration")
        if discovery.get("issuer") != issuer:
            raise Refused("InvalidIdentityToken", "The issuer's discovery document names another issuer")
        keys = jwt.PyJWKSet.from_dict(_fetch(str(discovery["jwks_uri"])))
        return keys[kid]
    except Refused:
        raise
    except (OSError, ValueError, KeyError, jwt.PyJWTError):
        raise Refused(
            "InvalidIdentityToken", "Couldn't retrieve verification key from your identity provider"
        ) from None


def _fetch(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    if parts.scheme != "https" and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise Refused("InvalidIdentityToken", "The issuer's keys must be served over https")
    with urllib.request.urlopen(url, timeout=10) as answer:
        document: dict[str, Any] = json.loads(answer.read())
    return document


def _trusted(policy: dict[str, Any], provider_arn: str, provider_url: str, claims: dict[str, Any]) -> bool:
    """Whether an Allow of the trust policy lets this provider's token (its claims) assume the role."""
    statements = policy.get("Statement", [])
    for statement in statements if isinstance(statements, list) else [statements]:
        actions = statement.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        federated = (statement.get("Principal") or {}).get("Federated", [])
        federated = [federated] if isinstance(federated, str) else federated
        if statement.get("Effect") != "Allow" or f"sts:{ACTION}" not in actions or provider_arn not in federated:
            continue
        if _conditions_met(statement.get("Condition") or {}, provider_url, claims):
            return True
    return False


def _conditions_met(condition: dict[str, dict[str, Any]], provider_url: str, claims: dict[str, Any]) -> bool:
    for operator, tests in condition.items():
        if operator not in ("StringEquals", "StringLike"):
            return False  # nothing of this stack writes another: never assumed met
        for key, wanted in tests.items():
            prefix, _, claim = key.rpartition(":")
            if prefix != provider_url or claim not in ("sub", "aud"):
                return False
            found = claims.get(claim)
            value = found if isinstance(found, str) else ""
            patterns = [wanted] if isinstance(wanted, str) else list(wanted)
            like = operator == "StringLike"
            if not any(fnmatch.fnmatchcase(value, p) if like else value == p for p in patterns):
                return False
    return True


def _error(start_response: StartResponse, refused: Refused) -> list[bytes]:
    body = (
        '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>'
        f"<Code>{refused.code}</Code><Message>{escape(refused.message)}</Message></Error>"
        "<RequestId>devstack-web-identity</RequestId></ErrorResponse>"
    ).encode()
    start_response(refused.status, [("Content-Type", "text/xml"), ("Content-Length", str(len(body)))])
    return [body]
