"""Running a session's egress proxy beside ``exec``: its own event loop in a thread of the broker.

The broker's main thread waits for the sandboxed command and handles
signals; the proxy serves on a Unix socket (bridged into the sandbox) and,
for tests and benchmarks, on a loopback TCP port. The socket lives in a
private directory (0700) and is made connectable for the sandbox user
alone; it is removed when the proxy stops. Stopping also closes the
session's evidence writer, so every ``egress.request`` record is in the
log before the session's revocation is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from broker.egress.destinations import Destination
from broker.egress.guards import RefusedRequest
from broker.egress.proxy import EgressProxy, ProxyLimits, Resolver

if TYPE_CHECKING:  # cryptography (for the session CA) loads only where a host is terminated
    from broker.egress.terminate.plan import Interceptor
    from broker.egress.terminate.writer import EvidenceWriter

T = TypeVar("T")


class RunningProxy:
    """A started proxy: ``socket_path`` (Unix) and ``port`` (loopback TCP, when asked for)."""

    def __init__(self, proxy: EgressProxy) -> None:
        self.proxy = proxy
        self.socket_path: Path | None = None
        self.port: int | None = None
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="egress-proxy", daemon=True)
        self._thread.start()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    def serve_unix(self, path: Path, uid: int | None = None, gid: int | None = None) -> None:
        async def start() -> asyncio.Server:
            return await asyncio.start_unix_server(self.proxy.handle, path=str(path), limit=self.proxy.limits.chunk)

        self._servers.append(self._call(start()))
        os.chmod(path, 0o600)
        if uid is not None and gid is not None:
            os.chown(path, uid, gid)
        self.socket_path = path

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
            merged.update(self.proxy.denials.items())
            merged.update(self.proxy.refusals.items())
            return merged

        return self._call(read())

    async def _cut(self, *, refusing: bool) -> None:
        """Close the listening sockets and cancel every connection (run on the proxy's loop)."""
        if refusing:
            self.proxy.refusing = True
        for server in self._servers:
            server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def refuse(self) -> None:
        """From now on nothing gets through: the sockets stop accepting and every open connection is cut."""
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
        return self.proxy.evidence.close() if self.proxy.evidence is not None else 0


@contextlib.contextmanager
def running_proxy(
    allow: tuple[Destination, ...],
    *,
    socket_owner: tuple[int, int] | None = None,
    unix: bool = True,
    tcp: bool = False,
    limits: ProxyLimits | None = None,
    resolver: Resolver | None = None,
    interceptor: Interceptor | None = None,
    evidence: EvidenceWriter | None = None,
) -> Iterator[RunningProxy]:
    """A proxy for ``allow`` serving until the block ends; its socket is owned by ``socket_owner`` (uid, gid).
    ``evidence`` takes the ``egress.request`` records of the terminated hosts (it is closed with the proxy)."""
    running = RunningProxy(EgressProxy(allow, limits, resolver, interceptor, evidence))
    directory = Path(tempfile.mkdtemp(prefix="broker-egress-"))
    try:
        if unix:
            uid, gid = socket_owner if socket_owner is not None else (None, None)
            running.serve_unix(directory / "proxy.sock", uid, gid)
        if tcp:
            running.serve_tcp()
        yield running
    finally:
        running.stop()
        shutil.rmtree(directory, ignore_errors=True)
