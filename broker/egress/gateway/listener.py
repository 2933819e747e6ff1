"""The gateway: one HTTP proxy for many sessions, on one TCP listener and one event loop, each request's session named
by its ``Proxy-Authorization``.

``broker serve`` with ``[gateway] listen`` runs it. Connections are accepted
by the broker's one accept loop (``broker.host.serving.listening``: at most
``max_connections`` at once, the rest closed) and handed to the gateway's
event loop, in a thread of its own, which serves every session's connections:
a thousand sessions cost no thread each. Off loopback the listener speaks TLS
(``[gateway] cert_file``/``key_file``); the handshake runs on the loop. The
listen address need not exist yet (``IP_FREEBIND``): a container network's
bridge, where the gateway is the only way out, appears with the network's
first container, long after ``broker serve`` started.

Each connection's first request head is read here (h11, within the proxy's
limits). A ``GET`` or ``HEAD`` of a path (origin form, no proxy) is the
gateway's own: answered by the function registered for that path (``route``:
the identity documents of the gateway's host), 404 otherwise, without any
credential. Anything else is a proxy request: its ``Proxy-Authorization:
Basic`` names the session (the user, ``s-ID``) and proves the caller holds its
proxy credential (the password; ``broker.egress.gateway.passes``). A missing,
malformed or wrong credential, one of a session the gateway does not hold (or
no longer: revoked), or of a session past its end, gets the same 407 with
``Proxy-Authenticate: Basic`` and nothing else: which part was wrong is
counted for the operator (``refused``: ``missing``, ``wrong``, ``ended``),
never told to the caller. An authenticated request is handed, head and
connection, to that session's own ``EgressProxy``
(``broker.egress.proxy.listener``): the allow-list, the terminated path, the
injectors, the operations and the evidence are the session's, exactly as its
per-session proxy would serve them, so a placeholder of one session sent on
another session's credential is just a string (that proxy knows nothing of
it). A CONNECT's tunnel stays the session's for as long as it is open.

``seat`` adds a session (``broker.egress.gateway.seat``); its ``refuse`` cuts
it at once: the credential is dropped (new connections: 407) and every open
connection of the session is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import h11

from broker.egress.exchange.limits import ProxyLimits
from broker.egress.exchange.refusals import Refused
from broker.egress.exchange.streams import close, read_head
from broker.egress.gateway.passes import REALM, Address, GatewayPass, Keys, basic_credentials
from broker.egress.gateway.seat import Seat
from broker.egress.proxy.listener import EgressProxy
from broker.host.serving.listening import Acceptor, Limits
from broker.vocab.errors import ConfigError
from broker.vocab.session_ids import is_session_id

LOG = logging.getLogger("broker.gateway")
T = TypeVar("T")
DEFAULT_MAX_CONNECTIONS = 4096
ENDED_KEPT = 4096  # ended sessions remembered, so a credential of one counts as ended rather than wrong
UNAUTHORIZED = b"broker gateway: proxy authentication required\n"
IP_FREEBIND, IPV6_FREEBIND = 15, 78  # Linux: bind an address not (yet) on an interface


@dataclass(frozen=True)
class Page:
    """What one of the gateway's own routes answers: a status, a content type, a body, and how long it may be cached
    (``Cache-Control``; None: no such header)."""

    status: int
    content_type: str
    body: bytes
    cache_control: str | None = None


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """The gateway's TLS: its certificate chain and key, TLS 1.2 at least; a file that does not load is a
    ``ConfigError`` naming the keys."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(cert_file), str(key_file))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"gateway.cert_file/gateway.key_file: {cert_file} and {key_file} do not load as a certificate chain and"
            f" its key ({type(exc).__name__})"
        ) from None
    return context


class Gateway:
    """The gateway's listener and event loop (see the module docstring)."""

    def __init__(
        self,
        listen: tuple[str, int],
        address: Address,
        tls: ssl.SSLContext | None,
        *,
        limits: ProxyLimits | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self.address = address
        self.tls = tls
        self.limits = limits or ProxyLimits()
        self.keys = Keys()
        #: Told each refused proxy credential's reason (missing, wrong, ended): the daemon's metrics count them.
        self.refused: Callable[[str], None] = _uncounted
        self._seats: dict[str, Seat] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._routes: dict[str, Callable[[], Page]] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gateway", daemon=True)
        self._thread.start()
        family = socket.AF_INET6 if ":" in listen[0] else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            freebind = (
                (socket.IPPROTO_IPV6, IPV6_FREEBIND) if family == socket.AF_INET6 else (socket.IPPROTO_IP, IP_FREEBIND)
            )
            self._listener.setsockopt(*freebind, 1)
            self._listener.bind(listen)
            self._listener.listen(socket.SOMAXCONN)
        except OSError as exc:
            self._listener.close()
            self._stop_loop()
            raise ConfigError(f"gateway.listen: cannot listen on {listen[0]}:{listen[1]} ({exc.strerror})") from None
        self.port = int(self._listener.getsockname()[1])
        self._stopping = threading.Event()
        self._acceptor: Acceptor[str] = Acceptor(
            self._listener,
            identify=_peer_address,
            key=lambda peer: peer,
            serve=_never,
            refuse=lambda connection, why: connection.close(),
            limits=Limits(total=max_connections, head_deadline=self.limits.head_timeout),
            stopping=self._stopping,
            name="gateway-accept",
            hand=self._take,
        )
        self._accepting = self._acceptor.start("gateway-accept")

    # -- sessions and routes (from other threads) ----------------------------------------------

    def new_pass(self) -> GatewayPass:
        """A new session's proxy credential (its secret made now)."""
        return GatewayPass(self.address, self.keys)

    def seat(self, session_id: str, proxy: EgressProxy, digest: bytes, expires_at: float) -> Seat:
        """Serve ``session_id`` with ``proxy`` to requests carrying its proxy credential (``digest``) until
        ``expires_at`` (seconds since the epoch) or its ``refuse``."""
        seat = Seat(session_id, proxy, digest, expires_at, self.on_loop, self._unseat)

        async def add() -> None:
            self._seats[session_id] = seat

        self.on_loop(add())
        return seat

    def route(self, path: str, answer: Callable[[], Page]) -> None:
        """Answer ``GET path`` (and ``HEAD``) to the gateway itself with ``answer()`` (run on the gateway's loop:
        it answers from memory, at once)."""
        if not path.startswith("/"):
            raise ValueError("a route is a path")
        self._routes[path] = answer

    @property
    def sessions(self) -> int:
        return len(self._seats)

    def on_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the gateway's loop and wait for it (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=60)

    def close(self) -> None:
        """Stop accepting, close every connection, stop the loop."""
        self._acceptor.stop()
        self._accepting.join(timeout=10)

        async def cut() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.on_loop(cut())
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()

    # -- on the loop ---------------------------------------------------------------------------

    def _unseat(self, seat: Seat) -> None:
        if self._seats.get(seat.session_id) is seat:
            del self._seats[seat.session_id]
        self._ended[seat.session_id] = None
        while len(self._ended) > ENDED_KEPT:
            self._ended.popitem(last=False)

    def _take(self, connection: socket.socket, peer: str, done: Callable[[], None]) -> None:
        """(The accept loop's thread.) Serve ``connection`` on the gateway's loop; ``done`` counts it out."""
        connection.setblocking(False)
        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(self._connection(connection, done)))

    async def _connection(self, connection: socket.socket, done: Callable[[], None]) -> None:
        """TLS (off loopback), then the connection served (``_serve``, in the task the stream protocol starts: the
        server's side of the stream, which a terminated tunnel's TLS inside it needs); ``done`` once it ends."""
        served = False

        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await self._serve(reader, writer)
            except (OSError, ssl.SSLError, TimeoutError, ConnectionError):
                pass
            except asyncio.CancelledError:  # the gateway stops, or the session was cut: the connection ends here
                writer.transport.abort()
            except Exception:  # a bug in one connection never stops the gateway
                LOG.exception("gateway: a connection failed")
                writer.transport.abort()
            finally:
                done()

        try:
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader(limit=self.limits.chunk, loop=loop)
            protocol = asyncio.StreamReaderProtocol(reader, connected, loop=loop)
            handshake = self.limits.head_timeout if self.tls is not None else None
            await loop.connect_accepted_socket(
                lambda: protocol, connection, ssl=self.tls, ssl_handshake_timeout=handshake
            )
            served = True
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError):
            pass
        except Exception:  # a bug: this connection goes, the gateway stays
            LOG.exception("gateway: a connection could not be opened")
        finally:
            if not served:
                connection.close()
                done()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head_bytes)
        seat, request = None, None
        try:
            seat, request = await self._first(conn, reader, writer)
        finally:
            if seat is None:
                await close(writer)
        assert seat is not None and isinstance(request, h11.Request)
        await self._hand(seat, conn, request, reader, writer)

    async def _first(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[Seat | None, h11.Request | None]:
        """The first request head, and the session whose credential it carries (None: answered here)."""
        try:
            request = await read_head(conn, reader, self.limits, self.limits.head_timeout)
        except Refused as refused:
            _answer(conn, writer, refused.status, b"broker gateway: " + refused.reason.encode() + b"\n")
            return None, None
        except h11.RemoteProtocolError:
            _answer(conn, writer, 400, b"broker gateway: malformed request\n")
            return None, None
        if not isinstance(request, h11.Request):
            return None, None
        if request.method != b"CONNECT" and request.target.startswith(b"/"):
            self._own(conn, writer, request)
            return None, None
        seat = self._authenticate(request.headers)
        if seat is None:
            _answer(conn, writer, 407, UNAUTHORIZED, [(b"proxy-authenticate", f'Basic realm="{REALM}"'.encode())])
        return seat, request

    async def _hand(
        self,
        seat: Seat,
        conn: h11.Connection,
        request: h11.Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """The rest of the connection is the session's: its proxy serves it (and closes it)."""
        task = asyncio.current_task()
        assert task is not None
        seat.tasks.add(task)
        try:
            await seat.proxy.handle(reader, writer, (conn, request))
        finally:
            seat.tasks.discard(task)

    def _authenticate(self, headers: Iterable[tuple[bytes, bytes]]) -> Seat | None:
        """The session whose proxy credential the request carries; None (and the reason counted) otherwise."""
        credentials = basic_credentials(headers)
        if credentials is None:
            self.refused("missing")
            return None
        user, password = credentials
        seat = self._seats.get(user) if is_session_id(user) else None
        if not self.keys.matches(password, seat.digest if seat is not None else None):
            self.refused("ended" if seat is None and user in self._ended else "wrong")
            return None
        assert seat is not None
        if seat.expires_at <= time.time():
            self.refused("ended")
            return None
        return seat

    def _own(self, conn: h11.Connection, writer: asyncio.StreamWriter, request: h11.Request) -> None:
        """A request to the gateway itself: one of its own routes, or 404."""
        path = request.target.split(b"?", 1)[0].decode("ascii", "replace")
        answer = self._routes.get(path) if request.method in (b"GET", b"HEAD") else None
        if answer is None:
            _answer(conn, writer, 404, b"broker gateway: no such page\n")
            return
        page = answer()
        headers = [(b"content-type", page.content_type.encode())]
        if page.cache_control is not None:
            headers.append((b"cache-control", page.cache_control.encode()))
        _answer(conn, writer, page.status, page.body, headers)


def _answer(
    conn: h11.Connection,
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """The gateway's own answer (no body to a HEAD: h11 knows), and the connection closes after it."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    fields = headers or [(b"content-type", b"text/plain; charset=utf-8")]
    fields = [*fields, (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    with contextlib.suppress(h11.LocalProtocolError):
        writer.write(conn.send(h11.Response(status_code=status, headers=fields)) or b"")
        if body and conn.our_state is h11.SEND_BODY:  # type: ignore[comparison-overlap]  # a HEAD: no body
            writer.write(conn.send(h11.Data(data=body)) or b"")
        writer.write(conn.send(h11.EndOfMessage()) or b"")


def _peer_address(connection: socket.socket) -> str:
    return str(connection.getpeername()[0])


def _never(connection: socket.socket, peer: str) -> None:
    raise AssertionError("the gateway's connections are handed over, never served in the accept loop")


def _uncounted(reason: str) -> None:
    return None
