"""A real OAuth 2.1 authorisation server on loopback, built with authlib's Flask integration, behind TLS.

What the ``oauth`` provider's tests and the bench talk to: the token
endpoint with refresh tokens that rotate at each use, with reuse detection
(a replaced refresh token presented again revokes its whole family), client
credentials and JWT bearer assertions (RFC 7523); revocation (RFC 7009);
introspection (RFC 7662, which resource servers such as
``devstack.oauth.resource`` and an MCP server check bearer tokens with);
resource indicators (RFC 8707: a token's ``aud`` is the resources it was
asked for); and its metadata (RFC 8414). Flask because it is the lightest
server integration authlib documents; werkzeug's threaded server serves it
with the TLS context the caller gives. Records live in memory
(``devstack.oauth.state``); ``access_lifetime``, ``rotate`` and
``refresh_delay`` (seconds each refresh waits before it is answered, which
widens any race) are knobs a test may turn. For a demo::

    python -m devstack.oauth.server --port 8443 --cert server.pem
"""

from __future__ import annotations

import argparse
import logging
import secrets
import signal
import ssl
import threading
import time
from typing import Any

from authlib.integrations.flask_oauth2 import AuthorizationServer as FlaskAuthorizationServer
from authlib.oauth2.rfc6749 import grants
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7523 import JWTBearerGrant
from authlib.oauth2.rfc7662 import IntrospectionEndpoint
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from flask import Flask, g, jsonify, request
from joserfc.jwk import ECKey, Key, OKPKey, RSAKey
from werkzeug.serving import BaseWSGIServer, make_server

from devstack.oauth.state import Client, Ledger, Token

AUTH_METHODS = ["client_secret_basic", "client_secret_post", "none"]


class AuthorizationServer:
    """The server on ``127.0.0.1:port`` (``with`` starts and stops it); ``ledger`` holds what it issued."""

    def __init__(self, context: ssl.SSLContext | None, *, port: int = 0, access_lifetime: int = 300) -> None:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
        self.ledger = Ledger()
        self.access_lifetime = access_lifetime
        self.rotate = True
        self.refresh_delay = 0.0
        self.app = Flask("oauth")
        self.oauth = FlaskAuthorizationServer(self.app, query_client=self._client, save_token=self._save)
        self.oauth.register_token_generator("default", self._generate)
        self.oauth.register_grant(_refresh_grant(self))
        self.oauth.register_grant(_ClientCredentials)
        self.oauth.register_grant(_jwt_bearer_grant(self))
        self.oauth.register_endpoint(_revocation(self.ledger))
        self.oauth.register_endpoint(_introspection(self.ledger))
        self._routes()
        self.server: BaseWSGIServer = make_server("127.0.0.1", port, self.app, threaded=True, ssl_context=context)
        self.port = int(self.server.server_port)
        scheme = "https" if context is not None else "http"
        self.issuer = f"{scheme}://127.0.0.1:{self.port}"
        self.token_url = self.issuer + "/token"
        self.revocation_url = self.issuer + "/revoke"
        self.introspection_url = self.issuer + "/introspect"
        self._thread: threading.Thread | None = None

    def __enter__(self) -> AuthorizationServer:
        self._thread = threading.Thread(target=self.server.serve_forever, name="oauth-server", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- what a test sets up -------------------------------------------------------------

    def add_client(
        self,
        client_id: str,
        *,
        secret: str | None = None,
        grant_types: tuple[str, ...] = ("refresh_token",),
        scopes: tuple[str, ...] = (),
        public_key_pem: bytes | None = None,
        subjects: tuple[str, ...] = (),
        may_introspect: bool = False,
    ) -> Client:
        return self.ledger.add_client(
            Client(client_id, secret, grant_types, scopes, public_key_pem, subjects, may_introspect)
        )

    def authorise(self, client_id: str, user: str, scope: str) -> str:
        """The operator's one authorisation (what a browser's authorization code flow ends with): a refresh token."""
        return self.ledger.new_family(client_id, user, scope)

    # -- authlib's hooks -----------------------------------------------------------------

    def _client(self, client_id: str) -> Client | None:
        with self.ledger.lock:
            return self.ledger.clients.get(client_id)

    def _generate(
        self,
        grant_type: str,
        client: Client,
        user: str | None = None,
        scope: str | None = None,
        expires_in: int | None = None,
        include_refresh_token: bool = True,
    ) -> dict[str, Any]:
        token: dict[str, Any] = {
            "token_type": "Bearer",
            "access_token": secrets.token_urlsafe(32),
            "expires_in": expires_in or self.access_lifetime,
        }
        if scope:
            token["scope"] = scope
        if include_refresh_token:
            token["refresh_token"] = secrets.token_urlsafe(32)
        return token

    def _save(self, token: dict[str, Any], oauth_request: Any) -> None:
        client: Client = oauth_request.client
        old: Token | None = getattr(oauth_request, "refresh_token", None)
        family = old.family if old is not None else None
        user = oauth_request.user if isinstance(oauth_request.user, str) else None
        resources = tuple(request.form.getlist("resource"))
        ledger = self.ledger
        ledger.add(
            Token(
                token["access_token"],
                "access_token",
                client.client_id,
                user,
                token.get("scope", ""),
                family,
                resources,
                expires_in=int(token["expires_in"]),
            )
        )
        with ledger.lock:
            ledger.grants[str(oauth_request.payload.grant_type)] += 1
            if family is not None:
                ledger.refreshes[family] += 1
        if "refresh_token" in token and old is not None:  # the successor keeps the family's scope (RFC 6749 s. 6)
            ledger.add(Token(token["refresh_token"], "refresh_token", client.client_id, user, old.scope, family))

    def _routes(self) -> None:
        app, oauth, ledger = self.app, self.oauth, self.ledger

        @app.post("/token")
        def token() -> Any:
            refused = _bad_resource()
            if refused is not None:
                return jsonify(error="invalid_target", error_description=refused), 400
            family = None
            if request.form.get("grant_type") == "refresh_token":
                family = ledger.answering(request.form.get("refresh_token", ""))
                if self.refresh_delay:
                    time.sleep(self.refresh_delay)
            try:
                response = oauth.create_token_response()
                claimed: Token | None = g.get("claimed")
                if claimed is not None and response.status_code != 200:
                    claimed.replaced = False  # a refused refresh does not use the token up
                return response
            finally:
                ledger.answered(family)

        @app.post("/revoke")
        def revoke() -> Any:
            return oauth.create_endpoint_response(RevocationEndpoint.ENDPOINT_NAME)

        @app.post("/introspect")
        def introspect() -> Any:
            return oauth.create_endpoint_response(IntrospectionEndpoint.ENDPOINT_NAME)

        @app.get("/.well-known/oauth-authorization-server")
        def metadata() -> Any:
            return jsonify(
                issuer=self.issuer,
                token_endpoint=self.token_url,
                revocation_endpoint=self.revocation_url,
                introspection_endpoint=self.introspection_url,
                grant_types_supported=["refresh_token", "client_credentials", JWTBearerGrant.GRANT_TYPE],
                token_endpoint_auth_methods_supported=AUTH_METHODS,
            )


def _bad_resource() -> str | None:
    """RFC 8707: why a ``resource`` is not an absolute https URI without a fragment (None: each is)."""
    for resource in request.form.getlist("resource"):
        if not resource.startswith("https://") or "#" in resource:
            return f"resource {resource[:60]!r} is not an absolute https URI"
    return None


def _refresh_grant(server: AuthorizationServer) -> type[grants.RefreshTokenGrant]:
    ledger = server.ledger

    class RefreshTokenGrant(grants.RefreshTokenGrant):  # type: ignore[misc]
        TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS
        INCLUDE_NEW_REFRESH_TOKEN = True

        def issue_token(self, user: str, refresh_token: Token) -> dict[str, Any]:
            scope = self.request.payload.scope or refresh_token.get_scope()
            token: dict[str, Any] = self.generate_token(user=user, scope=scope, include_refresh_token=server.rotate)
            return token

        def authenticate_refresh_token(self, value: str) -> Token | None:
            with ledger.lock:
                token = ledger.find(value, "refresh_token")
                if token is None or token.revoked:
                    return None
                if token.replaced:
                    ledger.reused(token)
                    return None
                if server.rotate:
                    token.replaced = True  # claimed now: a second request with it is a reuse
                    g.claimed = token
                return token

        def authenticate_user(self, refresh_token: Token) -> str | None:
            return refresh_token.user

        def revoke_old_credential(self, refresh_token: Token) -> None:
            return None  # replaced when claimed

    return RefreshTokenGrant


class _ClientCredentials(grants.ClientCredentialsGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]


def _jwt_bearer_grant(server: AuthorizationServer) -> type[JWTBearerGrant]:
    ledger = server.ledger

    class Assertions(JWTBearerGrant):  # type: ignore[misc]
        def resolve_issuer_client(self, issuer: str) -> Client | None:
            with ledger.lock:
                client = ledger.clients.get(issuer)
            return client if client is not None and client.public_key_pem is not None else None

        def resolve_client_public_key(self, client: Client) -> Key:
            assert client.public_key_pem is not None
            public = serialization.load_pem_public_key(client.public_key_pem)
            if isinstance(public, rsa.RSAPublicKey):
                return RSAKey.import_key(client.public_key_pem)
            if isinstance(public, ec.EllipticCurvePublicKey):
                return ECKey.import_key(client.public_key_pem)
            return OKPKey.import_key(client.public_key_pem)

        def authenticate_user(self, subject: str) -> str | None:
            client: Client = self.request.client
            return subject if subject in client.subjects else None

        def has_granted_permission(self, client: Client, user: str) -> bool:
            return user in client.subjects

        def get_audiences(self) -> list[str]:
            return [server.token_url, server.issuer]

    return Assertions


def _revocation(ledger: Ledger) -> type[RevocationEndpoint]:
    class Revocation(RevocationEndpoint):  # type: ignore[misc]
        CLIENT_AUTH_METHODS = AUTH_METHODS

        def query_token(self, value: str, hint: str | None) -> Token | None:
            return ledger.find(value)

        def revoke_token(self, token: Token, oauth_request: Any) -> None:
            token.revoked = True
            if token.kind == "refresh_token" and token.family is not None:
                ledger.revoke_family(token.family)

    return Revocation


def _introspection(ledger: Ledger) -> type[IntrospectionEndpoint]:
    class Introspection(IntrospectionEndpoint):  # type: ignore[misc]
        CLIENT_AUTH_METHODS = AUTH_METHODS

        def query_token(self, value: str, hint: str | None) -> Token | None:
            return ledger.find(value)

        def check_permission(self, token: Token, client: Client, oauth_request: Any) -> bool:
            return client.may_introspect or token.client_id == client.client_id

        def introspect_token(self, token: Token) -> dict[str, Any]:
            facts: dict[str, Any] = {
                "active": True,
                "client_id": token.client_id,
                "scope": token.scope,
                "token_type": "Bearer" if token.kind == "access_token" else "refresh_token",
                "iat": int(token.issued_at),
            }
            if token.user:
                facts["sub"] = token.user
            if token.resources:
                facts["aud"] = list(token.resources)
            if token.expires_in:
                facts["exp"] = int(token.issued_at + token.expires_in)
            return facts

    return Introspection


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--cert", required=True, help="PEM with the server's certificate and key")
    args = parser.parse_args()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert)
    with AuthorizationServer(context, port=args.port) as server:
        server.add_client("broker", secret="demo-client-secret", grant_types=("refresh_token",), scopes=("read",))
        print(f"token endpoint {server.token_url}; refresh token {server.authorise('broker', 'operator', 'read')}")
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
