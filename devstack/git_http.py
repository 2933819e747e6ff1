"""A real git smart-HTTP upstream: ``git http-backend`` (the CGI git ships) behind a small HTTP/1.1 server.

``GitHTTPServer`` serves the bare repositories under a root on loopback, over
TLS when given a server context (plain HTTP otherwise), optionally behind Basic
authentication whose password ``accepts`` checks (any user name, as GitHub
does). Request bodies may come with a length or chunked (git sends a push
larger than its ``http.postBuffer`` chunked); the whole body is handed to the
CGI. Every request is recorded (``requests``: method, target, headers, body)
so that tests can feed what a real git client sent to the broker's parsers;
a ``gate`` may answer a request itself before the backend sees it.

``bare_repository`` makes a bare repository that takes pushes over HTTP
(``http.receivepack``), with one commit on ``main``.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class GitUnavailable(RuntimeError):
    """git (and its http-backend) is not installed here."""


def git_binary() -> str:
    found = shutil.which("git")
    if found is None:
        raise GitUnavailable("git is not installed")
    return found


#: The environment git runs with here: no system or user configuration, no prompts, a fixed identity.
HERMETIC = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": "Dev Stack",
    "GIT_AUTHOR_EMAIL": "devstack@example.com",
    "GIT_COMMITTER_NAME": "Dev Stack",
    "GIT_COMMITTER_EMAIL": "devstack@example.com",
}


def git_env(**extra: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.gettempdir(), **HERMETIC, **extra}


def git(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run git; its standard output, or ``CalledProcessError`` carrying its standard error."""
    done = subprocess.run(
        [git_binary(), *args], cwd=cwd, env=env or git_env(), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, ["git", *args], done.stdout, done.stderr)
    return done.stdout


def bare_repository(root: Path, name: str, branch: str = "main") -> Path:
    """``root/name`` (e.g. ``octo/widgets.git``): bare, pushes over HTTP enabled, one commit on ``branch``."""
    repository = root / name
    repository.parent.mkdir(parents=True, exist_ok=True)
    git("init", "--quiet", "--bare", f"--initial-branch={branch}", str(repository))
    git("config", "http.receivepack", "true", cwd=repository)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        git("init", "--quiet", f"--initial-branch={branch}", str(work))
        (work / "README.md").write_text(f"# {name}\n")
        git("add", "README.md", cwd=work)
        git("commit", "--quiet", "-m", "first", cwd=work)
        git("push", "--quiet", str(repository), f"{branch}:refs/heads/{branch}", cwd=work)
    return repository


@dataclass(frozen=True)
class Recorded:
    """One request as it reached the server (the body whole, de-chunked)."""

    method: str
    target: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


@dataclass(frozen=True)
class Reply:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


Gate = Callable[[Recorded], Reply | None]


def _read_chunked(stream: Any) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int(stream.readline(1024).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while stream.readline(1024) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        parts.append(stream.read(size))
        stream.readline(16)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    context: ssl.SSLContext | None = None

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = self.socket.accept()
        if self.context is not None:
            sock = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address


class GitHTTPServer:
    """``git http-backend`` for the repositories under ``root``; see the module docstring."""

    def __init__(
        self,
        root: Path,
        *,
        context: ssl.SSLContext | None = None,
        accepts: Callable[[str], bool] | None = None,
        gate: Gate | None = None,
    ) -> None:
        self.root = root
        self.accepts = accepts
        self.gate = gate
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._server.context = context
        self.port = int(self._server.server_address[1])
        self.scheme = "https" if context is not None else "http"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, name: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/{name}"

    def start(self) -> GitHTTPServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> GitHTTPServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def pushes(self) -> list[Recorded]:
        """The ``POST .../git-receive-pack`` requests so far."""
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and r.target.endswith("/git-receive-pack")]

    def _record(self, request: Recorded) -> None:
        with self._lock:
            self.requests.append(request)

    def _authorized(self, header: str) -> bool:
        if self.accepts is None:
            return True
        scheme, _, credential = header.partition(" ")
        password = ""
        if scheme.lower() == "basic":
            with contextlib.suppress(ValueError):
                password = base64.b64decode(credential).decode().partition(":")[2]
        return bool(password) and self.accepts(password)

    def backend(self, request: Recorded) -> Reply:
        """The request run through ``git http-backend``."""
        path, _, query = request.target.partition("?")
        env = git_env(
            GIT_PROJECT_ROOT=str(self.root),
            GIT_HTTP_EXPORT_ALL="1",
            REQUEST_METHOD=request.method,
            PATH_INFO=path,
            QUERY_STRING=query,
            CONTENT_TYPE=request.header("Content-Type") or "",
            CONTENT_LENGTH=str(len(request.body)),
            GIT_HTTP_MAX_REQUEST_BUFFER="100M",
        )
        if self.accepts is not None:
            env["REMOTE_USER"] = "x-access-token"
        for name in ("Content-Encoding", "Git-Protocol"):
            value = request.header(name)
            if value:
                env["HTTP_" + name.upper().replace("-", "_")] = value
        done = subprocess.run(
            [git_binary(), "http-backend"], input=request.body, env=env, capture_output=True, check=False
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status = 200
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        return Reply(status, tuple(headers), payload)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                self.request.settimeout(60)
                if isinstance(self.request, ssl.SSLSocket):
                    self.request.do_handshake()
                super().setup()

            def _serve(self) -> None:
                if not server._authorized(self.headers.get("Authorization", "")):
                    self._reply(Reply(401, (("WWW-Authenticate", 'Basic realm="GitHub"'),), b""))
                    return
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    body = _read_chunked(self.rfile)
                else:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = self.rfile.read(length) if length else b""
                request = Recorded(self.command, self.path, tuple(self.headers.items()), body)
                server._record(request)
                reply = server.gate(request) if server.gate is not None else None
                self._reply(reply or server.backend(request))

            def _reply(self, reply: Reply) -> None:
                self.send_response(reply.status)
                for name, value in reply.headers:
                    if name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            do_GET = do_POST = _serve

            def log_message(self, format: str, *args: object) -> None:
                return

        return Handler
