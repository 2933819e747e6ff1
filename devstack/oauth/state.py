"""The authorisation server's records (``devstack.oauth.server``): its clients, its tokens and what it counted.

Clients and tokens implement authlib's ``ClientMixin`` and ``TokenMixin``, so
its grants and endpoints read them as they read a database's rows. A refresh
token belongs to a family (one operator authorisation); when rotation is on
(the default, as OAuth 2.1 asks for public clients), each refresh replaces
it with a successor of the family's original scope (RFC 6749 section 6: the
new refresh token's scope is the old one's, whatever the access token was
narrowed to), and a refresh token presented again after it was replaced is a
reuse: the whole family is revoked, its access tokens too, and
``reuse_detections`` counts it. ``races`` counts refresh requests of one
family that reached the server while another of the same family was still
being answered (what a broker without a single flight causes); ``refreshes``
counts the refresh grants answered, per family.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from authlib.oauth2.rfc6749 import ClientMixin, TokenMixin


@dataclass
class Client(ClientMixin):  # type: ignore[misc]
    client_id: str
    secret: str | None  # None: a public client
    grant_types: tuple[str, ...]
    scopes: tuple[str, ...]
    public_key_pem: bytes | None = None  # RFC 7523: what its assertions are signed with
    subjects: tuple[str, ...] = ()  # RFC 7523: the users its assertions may name
    may_introspect: bool = False  # a resource server's client: introspects any token

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> None:
        return None

    def get_allowed_scope(self, scope: str) -> str:
        return " ".join(s for s in (scope or "").split() if s in self.scopes)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return False

    def check_client_secret(self, client_secret: str) -> bool:
        return self.secret is not None and hmac.compare_digest(self.secret.encode(), client_secret.encode())

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        if self.secret is None:
            return method == "none"
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type: str) -> bool:
        return False

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in self.grant_types


@dataclass
class Token(TokenMixin):  # type: ignore[misc]
    value: str
    kind: str  # "access_token" or "refresh_token"
    client_id: str
    user: str | None
    scope: str
    family: str | None  # a refresh token's, and the access tokens refreshed from it
    resources: tuple[str, ...] = ()
    issued_at: float = field(default_factory=time.time)
    expires_in: int = 0  # 0: no end (a refresh token)
    revoked: bool = False
    replaced: bool = False  # a refresh token rotated away: presenting it again is a reuse

    def check_client(self, client: Client) -> bool:
        return self.client_id == client.get_client_id()

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return self.expires_in

    def is_expired(self) -> bool:
        return bool(self.expires_in) and time.time() >= self.issued_at + self.expires_in

    def is_revoked(self) -> bool:
        return self.revoked

    def get_user(self) -> str | None:
        return self.user

    def get_client(self) -> str:
        return self.client_id


class Ledger:
    """Every client and token, and the counts the tests and the bench read; one lock around all of it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.clients: dict[str, Client] = {}
        self.tokens: dict[str, Token] = {}
        self.reuse_detections = 0
        self.races = 0
        self.refreshes: Counter[str] = Counter()  # refresh grants answered, by family
        self.grants: Counter[str] = Counter()  # tokens issued, by grant type
        self._answering: Counter[str] = Counter()  # refresh requests being answered, by family

    def add_client(self, client: Client) -> Client:
        with self.lock:
            self.clients[client.client_id] = client
        return client

    def add(self, token: Token) -> Token:
        with self.lock:
            self.tokens[token.value] = token
        return token

    def find(self, value: str, kind: str | None = None) -> Token | None:
        with self.lock:
            token = self.tokens.get(value)
        return token if token is not None and (kind is None or token.kind == kind) else None

    def new_family(self, client_id: str, user: str, scope: str) -> str:
        """The operator's authorisation, once: a new family and its first refresh token."""
        token = Token(secrets.token_urlsafe(32), "refresh_token", client_id, user, scope, secrets.token_hex(8))
        return self.add(token).value

    def revoke_family(self, family: str) -> None:
        with self.lock:
            for token in self.tokens.values():
                if token.family == family:
                    token.revoked = True

    def reused(self, token: Token) -> None:
        """A replaced refresh token presented again: the family ends."""
        with self.lock:
            self.reuse_detections += 1
            if token.family is not None:
                self.revoke_family(token.family)

    def answering(self, value: str) -> str | None:
        """A refresh request for ``value`` begins: its family (counted as a race when one is already answered)."""
        with self.lock:
            token = self.tokens.get(value)
            if token is None or token.family is None:
                return None
            if self._answering[token.family]:
                self.races += 1
            self._answering[token.family] += 1
            return token.family

    def answered(self, family: str | None) -> None:
        if family is not None:
            with self.lock:
                self._answering[family] -= 1

    def live(self, kind: str = "access_token") -> list[Token]:
        with self.lock:
            return [t for t in self.tokens.values() if t.kind == kind and not t.revoked and not t.is_expired()]
