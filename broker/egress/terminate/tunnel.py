"""A terminated tunnel: TLS with the session CA, then requests one after another on the client's connection.

After the ``200`` to the CONNECT the proxy speaks TLS to the client with a
leaf certificate of the session CA for the CONNECT's host, and reads
requests in a loop (keep-alive: git push and ``gh`` make several on one
connection), each a ``Cycle`` (``broker.egress.terminate.cycle``), over one
kept connection upstream (``UpstreamLink``). Before each request head is
read, the tunnel waits for room in the evidence writer (back-pressure: the
log is never outrun and no record is dropped). The tunnel ends when the
client closes, a request ends it, or no request comes within
``keepalive_timeout``.

A plain-HTTP request through the proxy to a host the operations limit is
one ``Cycle`` too (one request per connection, as every plain-HTTP request
through the proxy is), checked and recorded the same way.
"""

from __future__ import annotations

import asyncio
from urllib.parse import SplitResult

import h11

from broker.egress.allowlist.gate import Gate
from broker.egress.evidence.record import Evidence
from broker.egress.evidence.writer import EvidenceWriter
from broker.egress.exchange.refusals import Refusal, Refused
from broker.egress.exchange.streams import read_head
from broker.egress.terminate.answers import send_answer, text_answer
from broker.egress.terminate.cycle import Cycle, Site
from broker.egress.terminate.interceptor import Interceptor
from broker.egress.terminate.upstream import UpstreamLink


def destination(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def serve_tunnel(
    gate: Gate,
    interceptor: Interceptor,
    host: str,
    port: int,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    sink: EvidenceWriter | None,
) -> None:
    """Terminate TLS for ``host``:``port`` on an open tunnel and serve its requests."""
    limits = gate.limits
    await asyncio.wait_for(writer.start_tls(interceptor.ca.server_context(host)), limits.head_timeout)
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_head_bytes)
    link = UpstreamLink(gate, host, port, interceptor.upstream_context(host, port))
    site = Site(host, port)
    try:
        first = True
        while True:
            if sink is not None:
                await sink.room()
            try:
                request = await read_head(
                    conn, reader, limits, limits.head_timeout if first else limits.keepalive_timeout
                )
            except TimeoutError:
                return
            except Refused as refused:  # a head too large
                gate.count_refusal(host, port, Refusal.MALFORMED)
                send_answer(conn, writer, text_answer(refused.status, refused.reason), close=True)
                return
            except h11.RemoteProtocolError:
                gate.count_refusal(host, port, Refusal.MALFORMED)
                send_answer(conn, writer, text_answer(400, "malformed request"), close=True)
                return
            if not isinstance(request, h11.Request):
                return
            first = False
            evidence = Evidence(destination(host, port), request)
            cycle = Cycle(gate, interceptor, site, link, (conn, reader, writer), request, evidence, sink)
            if not await cycle.run():
                return
            conn.start_next_cycle()
    finally:
        link.drop()


async def serve_plain(
    gate: Gate,
    interceptor: Interceptor,
    host: str,
    port: int,
    url: SplitResult,
    request: h11.Request,
    streams: tuple[h11.Connection, asyncio.StreamReader, asyncio.StreamWriter],
    sink: EvidenceWriter | None,
) -> None:
    """One plain-HTTP request (absolute-form ``request`` for ``url``) to a host the operations limit."""
    if sink is not None:
        await sink.room()
    name = f"[{host}]" if ":" in host else host
    origin = (url.path or "/") + (f"?{url.query}" if url.query else "")
    headers = [(b"host", f"{name}:{port}".encode("ascii"))]
    headers.extend((k, v) for k, v in request.headers if k != b"host")
    checked = h11.Request(
        method=request.method, target=origin.encode("ascii"), headers=headers, http_version=request.http_version
    )
    link = UpstreamLink(gate, host, port, None)
    try:
        evidence = Evidence(destination(host, port), request, checked.target)
        await Cycle(gate, interceptor, Site(host, port, keep=False), link, streams, checked, evidence, sink).run()
    finally:
        link.drop()
