"""A provider made ready before its calls: its SDK imported (``Sdk``), its connections opened.

The SDK first: the core imports it in its main thread before worker threads
use it (``providers.capabilities.Warming.preload``). Then the connections: a
direct ``broker issue`` spends most of its time on local work (imports,
config, policy, store) before its first provider call; against a provider a
round trip away, each new connection then adds two more round trips (TCP,
TLS). ``open_connections`` opens them in parallel into the pool the client's
calls draw from (urllib3's, under botocore and requests), so those calls find
them kept alive. It sends nothing and changes nothing at the provider. Behind
an HTTP proxy it does nothing (the pool would be the proxy's).
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Sdk:
    """The modules a provider imports on first use; ``revoking``: the part a revocation needs, when less."""

    modules: tuple[str, ...]
    revoking: tuple[str, ...] | None = None

    def load(self, minting: bool) -> None:
        """Import them now, in the calling thread (for a revocation only what it needs)."""
        for module in self.modules if minting or self.revoking is None else self.revoking:
            importlib.import_module(module)


def open_connections(pool: Any, count: int) -> None:
    """Open ``count`` connections of a urllib3 pool at once (returns when each is open or failed)."""
    if pool is None:
        return
    taken = [pool._get_conn() for _ in range(count)]  # idle ones first: only the missing ones are opened

    def connect(conn: Any) -> None:
        try:
            if not getattr(conn, "is_connected", False):
                conn.connect()
        except Exception:  # the call that needs it reconnects and reports the failure
            conn.close()

    threads = [threading.Thread(target=connect, args=(conn,), name="connect", daemon=True) for conn in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for conn in taken:
        pool._put_conn(conn)


def botocore_pool(client: Any) -> Any:
    """The urllib3 pool a botocore client sends to its endpoint through (None behind a proxy)."""
    endpoint = client._endpoint
    session, url = endpoint.http_session, endpoint.host
    if session._proxy_config.proxy_url_for(url):
        return None
    return session._get_connection_manager(url, None).connection_from_url(url)


def requests_pool(session: Any, url: str) -> Any:
    """The urllib3 pool a ``requests.Session`` sends ``url`` through (None behind a proxy).

    Found as its calls find it: with the environment's settings merged in (``REQUESTS_CA_BUNDLE`` names
    another pool than the session's own ``verify``).
    """
    import requests

    settings = session.merge_environment_settings(url, {}, None, session.verify, session.cert)
    if settings["proxies"]:
        return None
    prepared = requests.Request("GET", url).prepare()
    adapter = session.get_adapter(url)
    return adapter.get_connection_with_tls_context(prepared, settings["verify"], None, settings["cert"])


def with_connection(client: Any, url: str) -> Any:
    """An hvac client with one connection to ``url`` open in its session's pool."""
    open_connections(requests_pool(client.adapter.session, url), 1)
    return client
