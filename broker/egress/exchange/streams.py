"""Reading and closing the h11 streams of one exchange through the proxy, within its limits.

The listener reads a client's request head with ``read_head`` (refused once it outgrows ``max_head_bytes``), both
it and the terminated path read bodies and answers event by event with ``next_event`` (a timeout on every read),
and every stream the proxy ends is ended with ``close`` (bounded waits, then an abort). ``HOP_BY_HOP`` are the
headers never passed on. Nothing here holds state.
"""

from __future__ import annotations

import asyncio
import contextlib

import h11

from broker.egress.exchange.limits import ProxyLimits
from broker.egress.exchange.refusals import Refused

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


async def close(writer: asyncio.StreamWriter) -> None:
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
        async with asyncio.timeout(timeout):  # not wait_for: no task per read, once per request on a kept tunnel
            data = await reader.read(limits.max_head_bytes - received + 1)
        received += len(data)
        conn.receive_data(data)
