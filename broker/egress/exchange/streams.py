"""The small parts of one exchange through the egress proxy: its limits, the refusal, the CONNECT authority, the
proxy's own answer, the headers never passed on, reading h11 events with a timeout, closing a stream.

Split from ``broker.egress.proxy.listener`` (which decides and forwards) so that module stays readable; nothing
here holds state.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from dataclasses import dataclass

import h11

from broker.egress.destinations import IPAddress, canonical_host

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
        b"expect",
    }
)


@dataclass(frozen=True)
class ProxyLimits:
    max_connections: int = 128
    max_head_bytes: int = 16 * 1024
    chunk: int = 32 * 1024
    body_chunk: int = 256 * 1024  # a read of a request or answer body inside a terminated tunnel
    connect_timeout: float = 10.0
    head_timeout: float = 30.0
    keepalive_timeout: float = 120.0  # a terminated tunnel waiting for its next request
    idle_timeout: float = 900.0
    max_denied_destinations: int = 256  # distinct refused destinations, and distinct refused requests, counted
    max_checked_answer: int = 1024 * 1024  # a guarded JSON answer held back and checked (Vault: wrap_info)
    max_discarded_body: int = 256 * 1024 * 1024  # the rest of a refused request's body read and dropped, at most


class Refused(Exception):
    """A request the proxy answers itself, with ``status`` and a one-line reason.

    ``why`` names a refusal of a request to a credential host (an ``egress.refused`` record counts it); a
    destination that is not allowed is counted apart, as a denial.
    """

    def __init__(self, status: int, reason: str, why: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.why = why


def _address(text: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _printable(text: str, limit: int = 300) -> str:
    cleaned = "".join(c if c.isascii() and c.isprintable() else "?" for c in text)
    return cleaned[:limit]


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


async def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, RuntimeError, TimeoutError):
        if not writer.is_closing():
            await asyncio.wait_for(writer.drain(), 5)
        writer.close()
        await asyncio.wait_for(writer.wait_closed(), 5)
    with contextlib.suppress(Exception):
        writer.transport.abort()


Event = h11.Event | type[h11.PAUSED] | type[h11.NEED_DATA]


async def next_event(conn: h11.Connection, reader: asyncio.StreamReader, timeout: float, chunk: int) -> Event:
    """The next event of ``conn``, reading up to ``chunk`` bytes at a time; ``TimeoutError`` after ``timeout``."""
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        async with asyncio.timeout(timeout):  # not wait_for: no task per read, on the path every body byte takes
            data = await reader.read(chunk)
        conn.receive_data(data)


async def read_head(conn: h11.Connection, reader: asyncio.StreamReader, limits: ProxyLimits, timeout: float) -> Event:
    """The next request head (or what ends the connection), refused once more than ``max_head_bytes`` arrived
    without completing it."""
    received = 0
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        if received >= limits.max_head_bytes:
            raise Refused(400, f"the request head is larger than {limits.max_head_bytes} bytes")
        data = await asyncio.wait_for(reader.read(limits.max_head_bytes - received + 1), timeout)
        received += len(data)
        conn.receive_data(data)
