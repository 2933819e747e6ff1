"""The connection to the real host behind a terminated tunnel, kept from one request to the next.

git push and ``gh`` make several requests on one connection; opening a new
TLS connection upstream for each would cost a round trip or two per request
over a real link. The link opens on the first request (to a vetted address
only: the session's ``Gate``, verified TLS for a tunnel) and is kept when
both sides of the exchange ended cleanly (h11 in ``DONE`` both ways: no
``Connection: close``, the whole body sent and the whole answer read). A
kept connection the upstream has closed meanwhile is noticed before it is
used, or, for a request without a body, when the first answer byte does
not come: then it is opened again and the request sent once more (a request
with a body is never sent twice: it gets a 502).
"""

from __future__ import annotations

import asyncio
import ssl

import h11

from broker.egress.allowlist.gate import Gate
from broker.egress.exchange.streams import close


class UpstreamLink:
    """One tunnel's connection upstream: opened on demand, kept while the exchanges end cleanly."""

    def __init__(self, gate: Gate, host: str, port: int, tls: ssl.SSLContext | None) -> None:
        self.gate = gate
        self.host, self.port, self.tls = host, port, tls
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.conn: h11.Connection | None = None
        self.opened = 0  # connections opened over the tunnel's life

    def _usable(self) -> bool:
        return (
            self.writer is not None
            and self.reader is not None
            and self.conn is not None
            and not self.writer.is_closing()
            and not self.reader.at_eof()
            and self.conn.our_state is h11.IDLE
        )

    async def ensure(self) -> bool:
        """A connection ready for a request; whether it is a kept one (a request on it may find it closed)."""
        if self._usable():
            return True
        await self.close()
        self.reader, self.writer = await self.gate.open_upstream(self.host, self.port, self.tls)
        self.conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=self.gate.limits.max_head_bytes)
        self.opened += 1
        return False

    async def finish(self) -> None:
        """The exchange is over: keep the connection when both sides ended cleanly, else close it."""
        conn = self.conn
        if conn is not None and conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            return
        await self.close()

    async def close(self) -> None:
        writer, self.writer, self.reader, self.conn = self.writer, None, None, None
        if writer is not None:
            await close(writer)

    def drop(self) -> None:
        """Close without waiting (the tunnel ends, perhaps cancelled): what is buffered still goes, then FIN."""
        writer, self.writer, self.reader, self.conn = self.writer, None, None, None
        if writer is not None:
            writer.close()
