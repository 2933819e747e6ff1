"""A resource server that checks bearer tokens by introspection (RFC 7662), as an API or an MCP server does.

``Introspector`` is the check itself, for any server of the local stack that
takes the ``devstack.oauth.server`` tokens (an MCP server among them): the
token is active, its ``aud`` names this server (RFC 8707) and its scope holds
the one required. ``ResourceServer`` is the smallest such API, over TLS on
loopback: every ``GET`` answers 200 with who the token acts for and its
scope, or 401 with ``WWW-Authenticate: Bearer error="invalid_token"``; it
records each request's path and status (never the token).
"""

from __future__ import annotations

import json
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests


@dataclass(frozen=True)
class Introspection:
    subject: str
    scopes: tuple[str, ...]
    audience: tuple[str, ...]
    client_id: str  # the client the token was issued to


class Introspector:
    """Asks the authorisation server about a bearer token, as the resource server's own client."""

    def __init__(self, url: str, client_id: str, secret: str, ca_file: Path | None) -> None:
        self.url = url
        self.auth = (client_id, secret)
        self.session = requests.Session()
        self.session.verify = str(ca_file) if ca_file is not None else True
        self.session.trust_env = False

    def check(self, token: str, resource: str, scope: str | None = None) -> Introspection | None:
        """What the server says of an active ``token`` for ``resource`` (with ``scope``, when given); else None."""
        answer = self.session.post(
            self.url, data={"token": token, "token_type_hint": "access_token"}, auth=self.auth, timeout=10
        )
        facts: dict[str, Any] = answer.json() if answer.status_code == 200 else {}
        if facts.get("active") is not True or facts.get("token_type") != "Bearer":
            return None
        audience = facts.get("aud") or []
        audience = [audience] if isinstance(audience, str) else list(audience)
        scopes = tuple(str(facts.get("scope") or "").split())
        if resource not in audience or (scope is not None and scope not in scopes):
            return None
        return Introspection(str(facts.get("sub") or ""), scopes, tuple(audience), str(facts.get("client_id") or ""))


@dataclass(frozen=True)
class Seen:
    path: str
    status: int


class ResourceServer:
    """An API on ``127.0.0.1:port`` over TLS whose every ``GET`` needs a token ``introspector`` finds active for it."""

    def __init__(self, context: ssl.SSLContext, introspector: Introspector, scope: str | None = None) -> None:
        self.seen: list[Seen] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
                facts = introspector.check(token, server.resource, scope) if scheme.lower() == "bearer" else None
                if facts is None:
                    body, status = b'{"error": "invalid_token"}', 401
                else:
                    body, status = json.dumps({"sub": facts.subject, "scope": " ".join(facts.scopes)}).encode(), 200
                server.seen.append(Seen(self.path, status))
                self.send_response(status)
                if status == 401:
                    self.send_header("WWW-Authenticate", 'Bearer error="invalid_token"')
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self) -> tuple[Any, Any]:
                sock, address = self.socket.accept()
                return context.wrap_socket(sock, server_side=True), address

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.resource = f"https://127.0.0.1:{self.port}"

    def __enter__(self) -> ResourceServer:
        threading.Thread(target=self.server.serve_forever, name="oauth-resource", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
