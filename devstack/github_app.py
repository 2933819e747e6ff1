"""A local GitHub App emulator: the eight REST routes the broker calls, and 501 for anything else.

Tests start it in a thread (``with GitHubAppEmulator(...) as emulator``) and
ask the object, never a debug route, whether a token is live
(``token_state``). Test knobs: ``advance()`` moves the clock, ``delays``
holds seconds to stall per route, ``fail_revocations`` makes
``DELETE /installation/token`` answer 503, ``force()`` queues statuses for a
route (with ``Retry-After``), ``state.overgrant`` makes mints ignore their
narrowing (``"permissions"``, ``"repositories"`` or ``"all"``). ``calls`` records every request. For a demo:

    python -m devstack.github_app --port 8765 --app-id 123456 \\
        --public-key app.pub.pem --installation 'octo-org:widgets,docs-site:contents=write,metadata=read'
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from requests.structures import CaseInsensitiveDict

from devstack import github_shapes as shapes
from devstack.github_state import AppState, Installation, Reply, TokenStatus

API_VERSION = "2022-11-28"
ROUTES: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("GET", "get_app", re.compile(r"/app")),
    ("GET", "list_installations", re.compile(r"/app/installations")),
    ("GET", "get_installation", re.compile(r"/app/installations/(?P<installation_id>[^/]+)")),
    ("POST", "create_token", re.compile(r"/app/installations/(?P<installation_id>[^/]+)/access_tokens")),
    ("DELETE", "revoke_token", re.compile(r"/installation/token")),
    ("GET", "installation_repositories", re.compile(r"/installation/repositories")),
    ("GET", "org_installation", re.compile(r"/orgs/(?P<org>[^/]+)/installation")),
    ("GET", "repo_installation", re.compile(r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/installation")),
    ("GET", "user_installation", re.compile(r"/users/(?P<username>[^/]+)/installation")),
)


@dataclass(frozen=True)
class Call:
    """One request as the emulator saw it (the Authorization value included: test data only)."""

    method: str
    route: str  # a route name, or "" for an unknown route
    path: str
    body: Any
    authorization: str
    headers: Mapping[str, str]


class GitHubAppEmulator:
    def __init__(
        self,
        *,
        app_id: int,
        public_key_pem: bytes,
        client_id: str = "Iv23liEmulatorClient",
        slug: str = "broker-test-app",
        clock: Callable[[], float] = time.time,
        port: int = 0,
        prefix: str = "",
    ) -> None:
        """``prefix`` serves the API under a path, as GitHub Enterprise Server does (``/api/v3``)."""
        self.state = AppState(app_id=app_id, public_key_pem=public_key_pem, client_id=client_id, slug=slug, clock=clock)
        self.prefix = prefix.rstrip("/")
        self.delays: dict[str, float] = {}
        self.fail_revocations = False
        self.calls: list[Call] = []
        self._forced: dict[str, list[tuple[int, int | None]]] = {}
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self._server.daemon_threads = True
        self._server.emulator = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def api_url(self) -> str:
        return self.url + self.prefix

    def start(self) -> GitHubAppEmulator:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="github-emulator", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> GitHubAppEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- test knobs ----------------------------------------------------------------------

    def add_installation(
        self, account: str, repositories: Sequence[str], permissions: Mapping[str, str], **kwargs: Any
    ) -> Installation:
        return self.state.add_installation(account, repositories, permissions, **kwargs)

    def advance(self, seconds: float) -> None:
        self.state.advance(seconds)

    def token_state(self, token: str) -> TokenStatus:
        return self.state.token_state(token)

    def force(self, route: str, *statuses: int, retry_after: int | None = None) -> None:
        """Answer the next requests on ``route`` with ``statuses``, in order, before behaving again."""
        if route not in {name for _, name, _ in ROUTES}:
            raise KeyError(route)
        with self._lock:
            self._forced.setdefault(route, []).extend((s, retry_after) for s in statuses)

    def calls_to(self, route: str) -> list[Call]:
        return [c for c in self.calls if c.route == route]

    # -- dispatch ------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: Mapping[str, str], raw: bytes) -> Reply:
        parts = urlsplit(target)
        path = parts.path.rstrip("/") or "/"
        if self.prefix:
            path = path[len(self.prefix) :] if path.startswith(self.prefix + "/") else "/#outside-prefix"
        route, params = "", {}
        for route_method, name, pattern in ROUTES:
            match = pattern.fullmatch(path)
            if match and route_method == method:
                route, params = name, {k: unquote(v) for k, v in match.groupdict().items()}
                break
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = ...
        authorization = headers.get("Authorization", "")
        with self._lock:
            self.calls.append(Call(method, route, path, body, authorization, dict(headers)))
            forced = self._forced.get(route, [])
            pending = forced.pop(0) if forced else None
        if not route:
            return Reply(501, shapes.basic_error(f"Not Implemented: the emulator has no route {method} {path}", 501))
        if self.delays.get(route):
            self._stopping.wait(self.delays[route])
        if pending is not None:
            status, retry_after = pending
            extra = {"Retry-After": str(retry_after)} if retry_after is not None else {}
            return Reply(status, shapes.basic_error(f"forced by the test ({status})", status), extra)
        version = headers.get("X-GitHub-Api-Version", API_VERSION)
        if version != API_VERSION:
            return Reply(400, shapes.basic_error(f"The emulator only serves API version {API_VERSION}", 400))
        if body is ...:
            return Reply(400, shapes.basic_error("Problems parsing JSON", 400))
        return self._route(route, params, parts.query, authorization, body)

    def _route(self, route: str, params: dict[str, str], query: str, authorization: str, body: Any) -> Reply:
        state, base = self.state, self.api_url
        if route == "revoke_token":
            if self.fail_revocations:
                return Reply(503, shapes.basic_error("Service Unavailable", 503))
            token = state.token_from(authorization)
            return state.revoke(token) if token else Reply(401, shapes.basic_error("Bad credentials", 401))
        if route == "installation_repositories":
            token = state.token_from(authorization)
            return (
                state.token_repositories(base, token)
                if token
                else Reply(401, shapes.basic_error("Bad credentials", 401))
            )
        problem = state.check_jwt(authorization)
        if problem is not None:
            return Reply(401, shapes.basic_error(problem, 401))
        if route == "get_app":
            return state.get_app(base)
        if route == "list_installations":
            args = parse_qs(query)
            return state.list_installations(base, _int(args, "per_page", 30), _int(args, "page", 1))
        if route == "get_installation":
            return state.get_installation(base, params["installation_id"])
        if route == "create_token":
            return state.create_token(base, params["installation_id"], body)
        if route == "repo_installation":
            return state.find_installation(base, "repos", params["owner"], params["repo"])
        if route == "org_installation":
            return state.find_installation(base, "orgs", params["org"])
        return state.find_installation(base, "users", params["username"])


def _int(args: dict[str, list[str]], key: str, default: int) -> int:
    value = args.get(key, [""])[0]
    return int(value) if value.isdigit() else default


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "github-app-emulator/1"
    disable_nagle_algorithm = True

    def _dispatch(self) -> None:
        emulator: GitHubAppEmulator = self.server.emulator  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = CaseInsensitiveDict(self.headers.items())  # header names are case-insensitive, as GitHub reads them
        reply = emulator.handle(self.command, self.path, headers, raw)
        data = b"" if reply.body is None else json.dumps(reply.body).encode("utf-8")
        self.send_response(reply.status)
        self.send_header("X-GitHub-Api-Version-Selected", API_VERSION)
        for key, value in reply.headers.items():
            self.send_header(key, value)
        if reply.status != 204:
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if reply.status != 204:
            self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = do_OPTIONS = _dispatch

    def log_message(self, format: str, *args: Any) -> None:
        return None


# -- command line (for the demo) ---------------------------------------------------------


def _installation_arg(value: str) -> dict[str, Any]:
    """``ACCOUNT[@User]:REPO,REPO:PERM=LEVEL,...`` as an installation entry."""
    account, _, rest = value.partition(":")
    repos, _, perms = rest.partition(":")
    account, _, kind = account.partition("@")
    return {
        "account": account,
        "type": kind or "Organization",
        "repositories": [r for r in repos.split(",") if r],
        "permissions": dict(p.split("=", 1) for p in perms.split(",") if p),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.github_app", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--app-id", type=int, required=True)
    parser.add_argument("--client-id", default="Iv23liEmulatorClient")
    parser.add_argument("--public-key", type=Path, required=True, help="the App's public key (PEM)")
    parser.add_argument(
        "--state",
        type=Path,
        help='JSON: {"installations": [{"account", "type", "repositories", "permissions"}]}',
    )
    parser.add_argument(
        "--installation",
        action="append",
        default=[],
        type=_installation_arg,
        help="ACCOUNT[@User]:REPO,REPO:PERM=LEVEL,... (repeatable)",
    )
    args = parser.parse_args(argv)
    entries = list(args.installation)
    if args.state is not None:
        entries += json.loads(args.state.read_text())["installations"]
    emulator = GitHubAppEmulator(
        app_id=args.app_id,
        public_key_pem=args.public_key.read_bytes(),
        client_id=args.client_id,
        port=args.port,
    )
    for entry in entries:
        emulator.add_installation(
            entry["account"],
            entry["repositories"],
            entry["permissions"],
            account_type=entry.get("type", "Organization"),
            installation_id=entry.get("id"),
        )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    with emulator:
        print(f"github app emulator listening on {emulator.url}", flush=True)
        done.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
