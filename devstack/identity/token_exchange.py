"""An RFC 8693 token endpoint that trusts the broker's issuer, and the API its tokens open: a model provider's
workload identity federation, in the local stack.

``start_token_exchange`` runs two servers on loopback:

- the token endpoint (plain http: the broker reaches it on loopback), an
  authlib authorisation server (``authlib.integrations.flask_oauth2``) with a
  grant of its own for ``urn:ietf:params:oauth:grant-type:token-exchange``
  (authlib ships none): the ``subject_token`` must be a JWT
  (``subject_token_type`` ``...:jwt``) whose signature checks with the
  issuer's keys, fetched from ``jwks_url`` at each exchange as a provider
  with a registered JWKS URL does (or given once, ``keys``: uploaded keys),
  whose ``iss`` is the issuer, ``aud`` the endpoint's audience, ``exp`` not
  passed and ``iat`` not in the future, and whose ``sub`` matches one of
  ``subjects`` (globs, the provider's "trust policy"); then it issues a
  bearer access token for ``lifetime`` seconds. A refusal is RFC 6749's
  ``invalid_grant`` (or ``invalid_request``) with a description;
- the API (TLS with the caller's ``ssl_context``, as the proxy's upstream):
  ``GET /v1/me`` answers who the bearer token was issued to, or 401 for a
  token it did not issue or that has ended.

Every exchange and every API request is kept (``exchanges``, ``requests``:
the subject, the ``jti``, the token's fingerprint, never the token).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import secrets
import ssl
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from devstack.net import free_port

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
CLIENT_ID = "broker"


def fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:16]


@dataclass
class ExchangeServer:
    """The token endpoint (``token_url``) and the API (``api_port``, TLS) of one test's model provider."""

    token_url: str
    api_port: int
    issuer: str
    audience: str
    lifetime: int
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    issued: dict[str, tuple[str, float]] = field(default_factory=dict)  # token -> (subject, ends at, monotonic)
    _servers: list[Any] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()


def start_token_exchange(
    issuer: str,
    audience: str,
    subjects: list[str],
    ssl_context: ssl.SSLContext,
    *,
    jwks_url: str | None = None,
    keys: dict[str, Any] | None = None,
    lifetime: int = 600,
) -> ExchangeServer:
    """The two servers (see the module docstring), verifying with ``jwks_url`` (fetched) or ``keys`` (uploaded)."""
    from flask import Flask, jsonify, request
    from werkzeug.serving import make_server

    exchange = ExchangeServer("", 0, issuer, audience, lifetime)
    token_app = Flask("token-exchange")
    server = _authorization_server(token_app, exchange, subjects, jwks_url, keys)

    @token_app.post("/oauth/token")
    def token() -> Any:
        return server.create_token_response()

    api = Flask("model-api")

    @api.get("/v1/me")
    def me() -> Any:
        header = request.headers.get("Authorization", "")
        given = header[7:] if header.startswith("Bearer ") else ""
        with exchange._lock:
            found = exchange.issued.get(given)
            live = found is not None and time.monotonic() < found[1]
            exchange.requests.append({"path": "/v1/me", "token": fingerprint(given), "accepted": live})
        if not live or found is None:
            return jsonify({"error": "invalid_token"}), 401
        return jsonify({"sub": found[0]})

    token_port, api_port = free_port(), free_port()
    for app, port, context in ((token_app, token_port, None), (api, api_port, ssl_context)):
        served = make_server("127.0.0.1", port, app, threaded=True, ssl_context=context)
        threading.Thread(target=served.serve_forever, daemon=True).start()
        exchange._servers.append(served)
    exchange.token_url = f"http://127.0.0.1:{token_port}/oauth/token"
    exchange.api_port = api_port
    return exchange


def _authorization_server(
    app: Any, exchange: ExchangeServer, subjects: list[str], jwks_url: str | None, keys: dict[str, Any] | None
) -> Any:
    from authlib.integrations.flask_oauth2 import AuthorizationServer
    from authlib.oauth2.rfc6749 import ClientMixin
    from authlib.oauth2.rfc6749.errors import InvalidGrantError, InvalidRequestError
    from authlib.oauth2.rfc6749.grants import BaseGrant, TokenEndpointMixin
    from joserfc import jwt
    from joserfc.errors import JoseError
    from joserfc.jwk import KeySet

    class Client(ClientMixin):  # type: ignore[misc]
        """The broker: a public client of this grant alone."""

        def get_client_id(self) -> str:
            return CLIENT_ID

        def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
            return method == "none" and endpoint == "token"

        def check_grant_type(self, grant_type: str) -> bool:
            return grant_type == GRANT_TYPE

        def get_allowed_scope(self, scope: str) -> str:
            return scope

    class TokenExchangeGrant(BaseGrant, TokenEndpointMixin):  # type: ignore[misc]
        """RFC 8693: a subject token of the trusted issuer exchanged for an access token."""

        GRANT_TYPE = GRANT_TYPE
        TOKEN_ENDPOINT_AUTH_METHODS = ["none"]

        def validate_token_request(self) -> None:
            client = self.authenticate_token_endpoint_client()
            self.request.client = client
            form = self.request.payload.data
            if form.get("subject_token_type") != JWT_TYPE or not form.get("subject_token"):
                raise InvalidRequestError("subject_token must be a JWT (subject_token_type ...:jwt)")
            known = KeySet.import_key_set(keys if keys is not None else _fetch(str(jwks_url)))  # type: ignore[arg-type]
            try:
                token = jwt.decode(str(form["subject_token"]), known, algorithms=["ES256", "RS256"])
                registry = jwt.JWTClaimsRegistry(
                    iss={"essential": True, "value": exchange.issuer},
                    aud={"essential": True, "value": exchange.audience},
                    exp={"essential": True},
                    iat={"essential": True},
                    sub={"essential": True},
                )
                registry.validate(token.claims)
            except (JoseError, ValueError) as exc:
                refused = {"subject": None, "jti": None, "refused": str(exc)}
                exchange.exchanges.append(refused)
                raise InvalidGrantError(f"subject_token refused: {exc}") from None
            subject = str(token.claims["sub"])
            if not any(fnmatch.fnmatchcase(subject, pattern) for pattern in subjects):
                exchange.exchanges.append({"subject": subject, "jti": token.claims.get("jti"), "refused": "subject"})
                raise InvalidGrantError(f"subject {subject} is not trusted here")
            self.request.user = token.claims

        def create_token_response(self) -> Any:
            claims = self.request.user
            value = secrets.token_urlsafe(32)
            with exchange._lock:
                exchange.issued[value] = (str(claims["sub"]), time.monotonic() + exchange.lifetime)
                exchange.exchanges.append(
                    {"subject": claims["sub"], "jti": claims.get("jti"), "token": fingerprint(value), "refused": ""}
                )
            body = {
                "access_token": value,
                "issued_token_type": ACCESS_TOKEN_TYPE,
                "token_type": "Bearer",
                "expires_in": exchange.lifetime,
            }
            return 200, body, self.TOKEN_RESPONSE_HEADER

    server = AuthorizationServer(app, query_client=lambda client_id: Client() if client_id == CLIENT_ID else None)
    server.register_grant(TokenExchangeGrant)
    return server


def _fetch(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        document: dict[str, Any] = json.loads(answer.read())
    return document
