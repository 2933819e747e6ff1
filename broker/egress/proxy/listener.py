"""The per-session egress proxy: HTTP CONNECT and plain-HTTP forwarding to the session's allowed destinations only.

The sandbox's only way out. It parses HTTP/1.1 with ``h11`` (never by hand),
resolves names itself and connects to an address it vetted, so a name that
resolves to a loopback, link-local or private address is refused unless
that address is itself listed. A refused request gets a 403 and nothing is
sent upstream: no connection is even opened. ``broker session allow`` and
``disallow`` change the list of a running session: a connection opened
after the change is decided on the new one. Each refused destination is
counted (bounded), for one ``egress.denied`` record per destination when the
session ends. A CONNECT to a host the session's ``Interceptor`` terminates
(a credential host, or a host the operations limit) is served by
``broker.egress.terminate``: TLS with the session CA, then each request
checked, its credential put in, forwarded and recorded (``egress.request``).
A plain-HTTP request to a host the operations limit is checked and recorded
the same way; one to a credential host is refused (the secret goes there
only over verified TLS). Once the session is revoked (``refusing``, and the
interceptor's ``revoke``) every request is refused with a 403: in the
tunnel of a host whose clients read their own error shape (AWS: the S3 or
STS XML error, ``Interceptor.revoked_answer``), so an SDK names the
revocation; at the CONNECT or plain-HTTP request otherwise; nothing is sent
upstream. A refused request to a terminated host (plain HTTP,
or what ``broker.egress.terminate.guards`` refuses) is counted by destination and
reason the same way, for the ``egress.refused`` records. Memory and
connections are bounded: at most
``max_connections`` at once, request heads of at most ``max_head_bytes``,
and buffers of ``chunk`` bytes with back-pressure in each direction; an
open tunnel is copied by the kernel (``broker.egress.proxy.splice``). Plain
HTTP is one request per connection (``Connection: close`` both ways); a
request has one framing, the proxy's upstream (``broker.egress.terminate.framing``: one
with both ``Transfer-Encoding`` and ``Content-Length`` is refused with 400),
and h11 frames each side's body to match it.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import h11

from broker.egress.destinations import Destination, IPAddress, allowed, canonical_host
from broker.egress.exchange.streams import (
    HOP_BY_HOP,
    ProxyLimits,
    Refused,
    _address,
    _answer,
    _close,
    _printable,
    next_event,
    parse_authority,
    read_head,
)
from broker.egress.proxy import splice
from broker.egress.terminate.cycle import REVOKED
from broker.egress.terminate.framing import declared, framed
from broker.egress.terminate.guards import Refusal, RefusedRequest, tunnel_authority
from broker.egress.terminate.tunnel import serve_plain, serve_tunnel

if TYPE_CHECKING:
    from broker.egress.evidence.writer import EvidenceWriter
    from broker.egress.terminate.interceptor import Interceptor

__all__ = ["EgressProxy", "ProxyLimits", "Resolver", "system_resolver"]

OTHER_DESTINATIONS = "(other destinations)"

#: (host, port) -> addresses; the system resolver unless a test passes a fixed table.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


async def system_resolver(host: str, port: int) -> Sequence[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class EgressProxy:
    """The proxy of one session: ``allow`` decides; ``denials`` and ``refusals`` count what was refused."""

    def __init__(
        self,
        allow: tuple[Destination, ...],
        limits: ProxyLimits | None = None,
        resolver: Resolver | None = None,
        interceptor: Interceptor | None = None,
        evidence: EvidenceWriter | None = None,
    ) -> None:
        self.allow = allow
        self.interceptor = interceptor
        self.evidence = evidence  # where the egress.request records of terminated hosts go
        self.limits = limits or ProxyLimits()
        self.resolver = resolver or system_resolver
        self.denials: dict[str, int] = {}
        self.refusals: dict[RefusedRequest, int] = {}
        self.active = 0
        self.refusing = False  # the session was revoked: nothing more gets through
        self.disallowed: tuple[Destination, ...] = ()  # taken away while the session runs (``change_allow``)
        self._listed = {(e.address, e.port) for e in allow if e.address is not None}
        #: Told each decision (allowed, denied, refused): the daemon's metrics count them; nothing by default.
        self.decided: Callable[[str], None] = _uncounted

    def change_allow(self, destination: Destination, *, allow: bool) -> None:
        """``broker session allow|disallow``: every connection opened from now on is decided on the new list
        (each list is replaced whole, so the proxy's loop reads the old one or the new one, never half)."""
        if allow:
            self.disallowed = tuple(d for d in self.disallowed if d != destination)
            if destination not in self.allow:
                self.allow = (*self.allow, destination)
            if destination.address is not None:
                self._listed = self._listed | {(destination.address, destination.port)}
        else:
            self.allow = tuple(d for d in self.allow if d != destination)
            self.disallowed = (*self.disallowed, destination)
            self._listed = {(e.address, e.port) for e in self.allow if e.address is not None}

    def allows(self, host: str, port: int) -> bool:
        """Whether ``host``:``port`` (canonical) is allowed: listed, and not disallowed since."""
        return allowed(self.allow, host, port) and not allowed(self.disallowed, host, port)

    # -- deciding ------------------------------------------------------------------------

    def _deny(self, host: str, port: int) -> Refused:
        destination = _destination(host, port)
        if destination not in self.denials and len(self.denials) >= self.limits.max_denied_destinations:
            destination = OTHER_DESTINATIONS
        self.denials[destination] = self.denials.get(destination, 0) + 1
        self.decided("denied")
        return Refused(403, f"egress to {destination} is not allowed for this session")

    def count_refusal(self, host: str, port: int, reason: Refusal) -> None:
        key = RefusedRequest(_destination(host, port), reason)
        if key not in self.refusals and len(self.refusals) >= self.limits.max_denied_destinations:
            key = RefusedRequest(OTHER_DESTINATIONS, reason)
        self.refusals[key] = self.refusals.get(key, 0) + 1
        self.decided("refused")

    async def vetted_addresses(self, host: str, port: int) -> list[IPAddress]:
        """The addresses the proxy may connect to for ``host``:``port``; ``Refused`` (403) when none."""
        if not self.allows(host, port):
            raise self._deny(host, port)
        literal = _address(host)
        if literal is not None:
            self.decided("allowed")
            return [literal]
        try:
            answers = await asyncio.wait_for(self.resolver(host, port), self.limits.connect_timeout)
        except (OSError, TimeoutError, UnicodeError):
            raise Refused(502, f"{_printable(host)} could not be resolved") from None
        vetted: list[IPAddress] = []
        for text in answers:
            address = _address(text)
            if address is None or address in vetted:
                continue
            if (address.is_global and not address.is_multicast) or (address, port) in self._listed:
                vetted.append(address)
        if not vetted:
            raise self._deny(host, port)  # only loopback, link-local or private answers, none listed
        self.decided("allowed")
        return vetted

    async def open_upstream(
        self, host: str, port: int, tls: ssl.SSLContext | None = None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to a vetted address of ``host``:``port`` (TLS verified for ``host`` when ``tls``)."""
        last: Exception | None = None
        for address in await self.vetted_addresses(host, port):
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(
                        str(address), port, limit=self.limits.chunk, ssl=tls, server_hostname=host if tls else None
                    ),
                    self.limits.connect_timeout,
                )
            except (OSError, TimeoutError) as exc:
                last = exc
        raise Refused(502, f"{_printable(host)}:{port} could not be reached ({type(last).__name__})")

    # -- serving -------------------------------------------------------------------------

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: one CONNECT tunnel or one plain-HTTP request."""
        if self.active >= self.limits.max_connections:
            writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await _close(writer)
            return
        self.active += 1
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head_bytes)
        cut = False
        try:
            await self._serve(conn, reader, writer)
        except Refused as refused:
            _answer(conn, writer, refused.status, refused.reason)
        except h11.RemoteProtocolError:
            _answer(conn, writer, 400, "malformed request")
        except (OSError, TimeoutError, h11.LocalProtocolError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # The proxy stops (``ProxyThread``) and cuts every connection: the connection ends here, quietly
            # (asyncio of Python 3.11 reports a cancelled connection handler as an unhandled exception).
            cut = True
        finally:
            self.active -= 1
            if cut:
                writer.transport.abort()
            else:
                await _close(writer)

    async def _serve(self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await read_head(conn, reader, self.limits, self.limits.head_timeout)
        if not isinstance(request, h11.Request):
            return
        target = request.target.decode("ascii", "replace")
        if request.method == b"CONNECT":
            host, port = parse_authority(target)
            if self.interceptor is not None and self.interceptor.intercepts(host, port):
                await self._intercept(host, port, conn, reader, writer)
                return
            if self.refusing:
                raise Refused(403, REVOKED)
            addresses = await self.vetted_addresses(host, port)
            try:
                upstream = await splice.connect(addresses, port, self.limits.connect_timeout)
            except (OSError, TimeoutError) as exc:
                raise Refused(502, f"{_printable(host)}:{port} could not be reached ({type(exc).__name__})") from None
            head = conn.send(h11.Response(status_code=200, headers=[])) or b""
            await splice.tunnel(reader, writer, upstream, head, conn.trailing_data[0], self.limits.idle_timeout)
            return
        if self.refusing:
            raise Refused(403, REVOKED)
        await self._forward(conn, request, target, reader, writer)

    async def _forward(
        self,
        conn: h11.Connection,
        request: h11.Request,
        target: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        url = urlsplit(target)
        if url.scheme.lower() != "http" or not url.netloc:
            raise Refused(400, "a proxy request names an absolute http:// URL (https goes through CONNECT)")
        if "@" in url.netloc:
            raise Refused(400, "user info in the URL is not forwarded")
        try:
            host, port = canonical_host(url.hostname or ""), url.port or 80
        except ValueError:
            raise Refused(400, "the URL's port is not valid") from None
        ports = self.interceptor.credential_ports(host) if self.interceptor is not None else []
        if ports:
            self.count_refusal(host, port, Refusal.PLAIN_HTTP)
            https = tunnel_authority(host, ports[0]).decode()
            raise Refused(
                403,
                f"plain HTTP to {_destination(host, port)} is refused: a credential of this session goes there"
                f" only over verified TLS; use https://{https}",
            )
        if self.interceptor is not None and self.interceptor.limited(host, port):
            await self.vetted_addresses(host, port)  # a destination not allowed is denied before anything else
            await serve_plain(self, self.interceptor, host, port, url, request, (conn, reader, writer), self.evidence)
            return
        if not self.allows(host, port):
            raise self._deny(host, port)
        framing = declared(request.headers, request.http_version)  # one framing of the body, or 400
        headers = [(k, v) for k, v in request.headers if k not in HOP_BY_HOP and k != b"host"]
        headers = [(b"host", url.netloc.encode("ascii")), *framed(headers, framing), (b"connection", b"close")]
        origin = (url.path or "/") + (f"?{url.query}" if url.query else "")
        upstream_reader, upstream_writer = await self.open_upstream(host, port)
        await self._exchange(conn, request.method, origin, headers, reader, writer, upstream_reader, upstream_writer)

    async def _intercept(
        self, host: str, port: int, outer: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """A CONNECT to a terminated host: its requests go through ``broker.egress.terminate``."""
        interceptor = self.interceptor
        assert interceptor is not None
        if not self.allows(host, port):
            raise self._deny(host, port)
        if (interceptor.revoked or self.refusing) and not interceptor.answers_revoked(host, port):
            raise Refused(403, REVOKED)
        writer.write(outer.send(h11.Response(status_code=200, headers=[])) or b"")
        await writer.drain()
        if outer.trailing_data[0]:
            return  # the client spoke before the tunnel was open
        await serve_tunnel(self, interceptor, host, port, reader, writer, self.evidence)

    async def _exchange(
        self,
        conn: h11.Connection,
        method: bytes,
        origin: str,
        headers: list[tuple[bytes, bytes]],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream_reader: asyncio.StreamReader,
        upstream_writer: asyncio.StreamWriter,
    ) -> None:
        """Send one plain-HTTP request upstream (its body from the client), relay the answer, close upstream."""
        try:
            upstream = h11.Connection(h11.CLIENT, max_incomplete_event_size=self.limits.max_head_bytes)
            if conn.they_are_waiting_for_100_continue:
                writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b"")
            upstream_writer.write(upstream.send(h11.Request(method=method, target=origin, headers=headers)) or b"")
            while True:  # the request body
                event = await next_event(conn, reader, self.limits.idle_timeout, self.limits.chunk)
                if isinstance(event, h11.Data):
                    upstream_writer.write(upstream.send(h11.Data(data=event.data)) or b"")
                    await upstream_writer.drain()
                elif isinstance(event, h11.EndOfMessage):
                    upstream_writer.write(upstream.send(h11.EndOfMessage()) or b"")
                    break
                else:
                    return
            await upstream_writer.drain()
            await self._relay_response(conn, upstream, upstream_reader, writer)
        finally:
            await _close(upstream_writer)

    async def _relay_response(
        self,
        conn: h11.Connection,
        upstream: h11.Connection,
        upstream_reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        while True:
            event = await next_event(upstream, upstream_reader, self.limits.idle_timeout, self.limits.chunk)
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                headers = [(k, v) for k, v in event.headers if k not in HOP_BY_HOP]
                headers.append((b"connection", b"close"))
                response = h11.Response(status_code=event.status_code, headers=headers, reason=event.reason)
                writer.write(conn.send(response) or b"")
            elif isinstance(event, h11.Data):
                writer.write(conn.send(h11.Data(data=event.data)) or b"")
                await writer.drain()
            elif isinstance(event, h11.EndOfMessage):
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await writer.drain()
                return
            else:
                raise Refused(502, "the upstream closed the connection before answering")


def _uncounted(decision: str) -> None:
    return None


def _destination(host: str, port: int) -> str:
    return _printable(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
