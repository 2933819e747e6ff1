"""The proxy's thread: a session's egress proxy beside ``exec``, on its own event loop in a thread of the broker.

The broker's main thread waits for the sandboxed command and handles
signals; the proxy serves on a Unix socket (bridged into the sandbox) and,
for tests and benchmarks, on a loopback TCP port. The socket is made by
``broker.host.egress_socket`` (in the broker's own directory, with its final
owner and mode before anyone else can reach it) and removed when the proxy
stops. Stopping also closes the session's evidence writer, so every
``egress.request`` record is in the log before the session's revocation is.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import tempfile
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from broker.egress.allowlist.gate import Resolver
from broker.egress.destinations import Destination
from broker.egress.exchange.limits import ProxyLimits
from broker.egress.exchange.refusals import RefusedRequest
from broker.egress.proxy.listener import EgressProxy
from broker.host.egress_socket import EgressSocket

if TYPE_CHECKING:  # cryptography (for the session CA) loads only where a host is terminated
    from broker.egress.evidence.writer import EvidenceWriter
    from broker.egress.terminate.interceptor import Interceptor

T = TypeVar("T")


class ServedProxy(Protocol):
    """What a running session holds of its proxy, whoever serves it: a ``ProxyThread`` of its own, or its seat on a
    gateway (``broker.egress.gateway.seat``)."""

    proxy: EgressProxy
    socket_path: Path | None

    def refuse(self) -> None:
        """Nothing gets through from now on; every open connection is cut."""

    def denials(self) -> dict[str | RefusedRequest, int]:
        """What the proxy refused so far (destinations, and refused requests by kind), with how often."""

    def stop(self) -> int:
        """Stop serving and write the last evidence records; how many could not be written."""


class ProxyThread:
    """A started proxy: ``socket_path`` (Unix) and ``port`` (loopback TCP, when asked for)."""

    def __init__(self, proxy: EgressProxy) -> None:
        self.proxy = proxy
        self.socket_path: Path | None = None
        self._unix: EgressSocket | None = None
        self.port: int | None = None
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="egress-proxy", daemon=True)
        self._thread.start()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    def serve_unix(self, unix: EgressSocket) -> None:
        """Serve on ``unix`` (already bound, with its final owner and mode); it is removed when the proxy stops."""

        async def start() -> asyncio.Server:
            return await asyncio.start_unix_server(self.proxy.handle, sock=unix.listener, limit=self.proxy.limits.chunk)

        self._unix = unix
        self._servers.append(self._call(start()))
        self.socket_path = unix.path

    def serve_tcp(self, host: str = "127.0.0.1", port: int = 0) -> int:
        async def start() -> asyncio.Server:
            return await asyncio.start_server(self.proxy.handle, host, port, limit=self.proxy.limits.chunk)

        server = self._call(start())
        self._servers.append(server)
        self.port = int(server.sockets[0].getsockname()[1])
        return self.port

    def denials(self) -> dict[str | RefusedRequest, int]:
        """What the proxy refused so far: each destination not allowed (its ``HOST:PORT``) and each kind of refused
        request to a credential host (``RefusedRequest``), with how often; what ``log_denials`` records."""

        async def read() -> dict[str | RefusedRequest, int]:
            merged: dict[str | RefusedRequest, int] = {}
            merged.update(self.proxy.gate.denials.items())
            merged.update(self.proxy.gate.refusals.items())
            return merged

        return self._call(read())

    async def _cut(self, *, refusing: bool) -> None:
        """Cancel every connection, and close the listening sockets unless the proxy goes on refusing (run on the
        proxy's loop)."""
        if refusing:
            if self.proxy.interceptor is not None:
                self.proxy.interceptor.revoke()  # the terminated tunnels' requests are refused as well
            self.proxy.refusing = True
        else:
            for server in self._servers:
                server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def refuse(self) -> None:
        """From now on nothing gets through: every open connection is cut, and each new request is refused with a
        403 until the proxy stops (an AWS host's in its SDKs' XML error: ``EgressProxy``), so a client still
        running while it is stopped reads why."""
        with contextlib.suppress(Exception):
            self._call(self._cut(refusing=True))

    def stop(self) -> int:
        """Cut every connection, stop the loop, write the last evidence records; how many could not be written."""
        with contextlib.suppress(Exception):
            self._call(self._cut(refusing=False))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()
        if self._unix is not None:
            self._unix.listener.close()
            self._unix.remove()
        return self.proxy.evidence.close() if self.proxy.evidence is not None else 0


@contextlib.contextmanager
def proxy_thread(
    allow: tuple[Destination, ...],
    *,
    unix: EgressSocket | bool = True,
    tcp: bool = False,
    limits: ProxyLimits | None = None,
    resolver: Resolver | None = None,
    interceptor: Interceptor | None = None,
    evidence: EvidenceWriter | None = None,
) -> Iterator[ProxyThread]:
    """A proxy for ``allow`` serving until the block ends, on ``unix`` (a session's socket; ``True``: one in a
    private temporary directory of this user's, for tests and benchmarks) and on loopback TCP with ``tcp``.
    ``evidence`` takes the ``egress.request`` records of the terminated hosts (it is closed with the proxy)."""
    running = ProxyThread(EgressProxy(allow, limits, resolver, interceptor, evidence))
    private = Path(tempfile.mkdtemp(prefix="broker-egress-")) if unix is True else None
    try:
        if private is not None:
            running.serve_unix(EgressSocket(private, "s-" + secrets.token_hex(6), None, passable=False))
        elif isinstance(unix, EgressSocket):
            running.serve_unix(unix)
        if tcp:
            running.serve_tcp()
        yield running
    finally:
        running.stop()
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
