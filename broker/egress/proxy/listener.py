"""The per-session egress proxy's listener: HTTP CONNECT and plain-HTTP forwarding to allowed destinations only.

The sandbox's only way out. It parses HTTP/1.1 with ``h11`` (never by hand)
and connects only through the session's ``Gate``
(``broker.egress.allowlist.gate``: the allow-list at connect time, a vetted
address of an allowed destination, each refusal counted), so a refused
request gets a 403 and nothing is sent upstream: no connection is even
opened. A CONNECT to a host the session's ``Interceptor`` terminates (a
credential host, or a host the operations limit) is handed to
``broker.egress.terminate`` (``serve_tunnel``: TLS with the session CA, then
each request checked, its credential put in, forwarded and recorded,
``egress.request``), with the gate it opens its upstream connections
through; a plain-HTTP request to a host the operations limit is checked and
recorded the same way (``serve_plain``); one to a credential host is refused
(the secret goes there only over verified TLS). Any other CONNECT is a plain
tunnel, copied by the kernel (``broker.egress.proxy.splice``). Once the
session is revoked (``refusing``, and the interceptor's ``revoke``) every
request is refused with a 403: in the tunnel of a host whose clients read
their own error shape (AWS: the S3 or STS XML error,
``Interceptor.revoked_answer``), so an SDK names the revocation; at the
CONNECT or plain-HTTP request otherwise; nothing is sent upstream. Memory
and connections are bounded: at most ``max_connections`` at once, request
heads of at most ``max_head_bytes``, and buffers of ``chunk`` bytes with
back-pressure in each direction. Plain HTTP is one request per connection
(``Connection: close`` both ways); a request has one framing, the proxy's
upstream (``broker.egress.terminate.framing``: one with both
``Transfer-Encoding`` and ``Content-Length`` is refused with 400), and h11
frames each side's body to match it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import h11

from broker.egress.allowlist.gate import Gate, Resolver, destination_text, printable
from broker.egress.destinations import Destination, canonical_host
from broker.egress.exchange.limits import ProxyLimits
from broker.egress.exchange.refusals import REVOKED, Refusal, Refused
from broker.egress.exchange.streams import HOP_BY_HOP, close, next_event, read_head
from broker.egress.proxy import splice
from broker.egress.terminate.framing import declared, framed
from broker.egress.terminate.guards import tunnel_authority
from broker.egress.terminate.tunnel import serve_plain, serve_tunnel

if TYPE_CHECKING:
    from broker.egress.evidence.writer import EvidenceWriter
    from broker.egress.terminate.interceptor import Interceptor

__all__ = ["EgressProxy", "ProxyLimits", "Resolver"]


class EgressProxy:
    """The proxy of one session: its ``gate`` decides where it may connect and counts what it refused."""

    def __init__(
        self,
        allow: tuple[Destination, ...],
        limits: ProxyLimits | None = None,
        resolver: Resolver | None = None,
        interceptor: Interceptor | None = None,
        evidence: EvidenceWriter | None = None,
    ) -> None:
        self.limits = limits or ProxyLimits()
        self.gate = Gate(allow, self.limits, resolver)
        self.interceptor = interceptor
        self.evidence = evidence  # where the egress.request records of terminated hosts go
        self.active = 0
        self.refusing = False  # the session was revoked: nothing more gets through

    @property
    def decided(self) -> Callable[[str], None]:
        return self.gate.decided

    @decided.setter
    def decided(self, count: Callable[[str], None]) -> None:
        """Told each decision (allowed, denied, refused): the daemon's metrics count them."""
        self.gate.decided = count

    def change_allow(self, destination: Destination, *, allow: bool) -> None:
        """``broker session allow|disallow`` (``Gate.change_allow``)."""
        self.gate.change_allow(destination, allow=allow)

    # -- serving -------------------------------------------------------------------------

    async def handle(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        first: tuple[h11.Connection, h11.Request] | None = None,
    ) -> None:
        """One client connection: one CONNECT tunnel or one plain-HTTP request (``first``: its head, when a
        gateway read it already to know the session)."""
        if self.active >= self.limits.max_connections:
            writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await close(writer)
            return
        self.active += 1
        conn = first[0] if first else h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head_bytes)
        cut = False
        try:
            await self._serve(conn, reader, writer, first[1] if first else None)
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
                await close(writer)

    async def _serve(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        first: h11.Request | None = None,
    ) -> None:
        request = first or await read_head(conn, reader, self.limits, self.limits.head_timeout)
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
            addresses = await self.gate.vetted_addresses(host, port)
            try:
                upstream = await splice.connect(addresses, port, self.limits.connect_timeout)
            except (OSError, TimeoutError) as exc:
                raise Refused(502, f"{printable(host)}:{port} could not be reached ({type(exc).__name__})") from None
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
            self.gate.count_refusal(host, port, Refusal.PLAIN_HTTP)
            https = tunnel_authority(host, ports[0]).decode()
            raise Refused(
                403,
                f"plain HTTP to {destination_text(host, port)} is refused: a credential of this session goes there"
                f" only over verified TLS; use https://{https}",
            )
        if self.interceptor is not None and self.interceptor.limited(host, port):
            await self.gate.vetted_addresses(host, port)  # a destination not allowed is denied before anything else
            await serve_plain(
                self.gate, self.interceptor, host, port, url, request, (conn, reader, writer), self.evidence
            )
            return
        if not self.gate.allows(host, port):
            raise self.gate.deny(host, port)
        framing = declared(request.headers, request.http_version)  # one framing of the body, or 400
        headers = [(k, v) for k, v in request.headers if k not in HOP_BY_HOP and k != b"host"]
        headers = [(b"host", url.netloc.encode("ascii")), *framed(headers, framing), (b"connection", b"close")]
        origin = (url.path or "/") + (f"?{url.query}" if url.query else "")
        upstream_reader, upstream_writer = await self.gate.open_upstream(host, port)
        await self._exchange(conn, request.method, origin, headers, reader, writer, upstream_reader, upstream_writer)

    async def _intercept(
        self, host: str, port: int, outer: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """A CONNECT to a terminated host: its requests go through ``broker.egress.terminate``."""
        interceptor = self.interceptor
        assert interceptor is not None
        if not self.gate.allows(host, port):
            raise self.gate.deny(host, port)
        if (interceptor.revoked or self.refusing) and not interceptor.answers_revoked(host, port):
            raise Refused(403, REVOKED)
        writer.write(outer.send(h11.Response(status_code=200, headers=[])) or b"")
        await writer.drain()
        if outer.trailing_data[0]:
            return  # the client spoke before the tunnel was open
        await serve_tunnel(self.gate, interceptor, host, port, reader, writer, self.evidence)

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
            await close(upstream_writer)

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


def parse_authority(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` of a CONNECT request; the host in canonical form."""
    host, colon, port_text = text.rpartition(":")
    if not colon or not host or not port_text.isdigit() or len(port_text) > 5 or not 0 < int(port_text) < 65536:
        raise Refused(400, "CONNECT needs HOST:PORT")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise Refused(400, "an IPv6 address is written [ADDRESS]:PORT")
    return canonical_host(host), int(port_text)


def _answer(conn: h11.Connection, writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    """The proxy's own answer to a request it did not forward (when the exchange still allows one)."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    body = f"broker egress proxy: {reason}\n".encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    try:
        writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
        writer.write(conn.send(h11.Data(data=body)) or b"")
        writer.write(conn.send(h11.EndOfMessage()) or b"")
    except h11.LocalProtocolError:
        return
