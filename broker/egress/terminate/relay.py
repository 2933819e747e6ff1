"""The answer from the upstream back to the client inside a terminated tunnel: masked, and held while it is checked.

Every byte of the answer goes through the ``Masker`` first (the session's
secrets become their stand-ins, in the head's values and the body); a
compressed answer from a credential host is refused (it cannot be checked).
Two checks may hold an answer back before the client gets any of it:

- a guarded host's JSON answer (``broker.egress.terminate.guards``: Vault's wrapping
  token) is held whole, at most ``max_checked_answer`` bytes, and refused
  (502) when it holds the guarded key;
- an answer whose request's passage screens it (``Screening``: the AWS
  re-signer, against credentials the session does not own) is read through
  its ``AnswerScreen`` after the masker: the head and the first ``hold``
  bytes of the body are held (``hold`` None: the whole answer, at most
  ``max_checked_answer``), so a refusal within them is a clean answer and
  nothing of the upstream's reaches the client; past them the answer
  streams, still screened, and a refusal then cuts it off (the client's
  connection is closed mid-body, so it never reads a complete answer).

An answer whose request's operations decision asked for it goes through
that decision's ``AnswerRewrite`` before the masker (MCP: a list answer
without what the session may not use): its head (the body's length then
framed by the proxy), and its body within the rewrite's own bound; what it
cannot read is refused (502, or the answer cut off once it has begun).

What is ready goes to the client in one write, before the proxy waits for
more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import h11

from broker.egress.evidence.record import Evidence
from broker.egress.exchange.limits import ProxyLimits
from broker.egress.exchange.refusals import Refusal, Refused
from broker.egress.exchange.streams import HOP_BY_HOP
from broker.egress.injectors.interface import AnswerScreen
from broker.egress.injectors.swap import AnswerGuard
from broker.egress.operations.decision import AnswerRefused, AnswerRewrite
from broker.egress.terminate.guards import HeldAnswer, held_back
from broker.egress.terminate.masking import Masker


class Stale(Exception):
    """A kept upstream connection turned out closed before any answer came."""


class Relay:
    """One answer on its way to the client (see the module docstring)."""

    def __init__(
        self,
        client: tuple[h11.Connection, asyncio.StreamWriter],
        evidence: Evidence,
        limits: ProxyLimits,
        masker: Masker,
        *,
        keep: bool,
        guard: AnswerGuard | None = None,
        screen: AnswerScreen | None = None,
        rewrite: AnswerRewrite | None = None,
    ) -> None:
        self.conn, self.writer = client
        self.evidence = evidence
        self.limits = limits
        self.masker = masker
        self.keep = keep
        self.guard = guard
        self.screen = screen
        self.rewrite = rewrite
        self._out = bytearray()  # the answer's bytes for the client, written once the proxy would wait
        self._held: HeldAnswer | None = None  # a guarded answer, held whole
        self._pending: h11.Response | None = None  # a screened answer's head, held with the start of its body
        self._window = bytearray()

    async def run(self, up: h11.Connection, upstream: asyncio.StreamReader, stale_ok: bool) -> None:
        answered = False
        while True:
            try:
                event = up.next_event()
            except h11.RemoteProtocolError:
                raise Refused(502, "the upstream's answer is not HTTP/1.1 the proxy can read") from None
            if event is h11.NEED_DATA:
                await self.flush()
                try:
                    async with asyncio.timeout(self.limits.idle_timeout):
                        data = await upstream.read(self.limits.body_chunk)
                except ConnectionError:
                    if stale_ok and not answered:
                        raise Stale() from None
                    raise Refused(502, "the upstream broke the connection") from None
                except TimeoutError:
                    raise Refused(504, "the upstream did not answer in time") from None
                up.receive_data(data)
                continue
            if isinstance(event, h11.InformationalResponse):
                answered = True
            elif isinstance(event, h11.Response):
                answered = True
                self._respond(event)
            elif isinstance(event, h11.Data):
                data = event.data if self.rewrite is None else _rewritten(self.rewrite, event.data)
                self._body(self.masker.feed(data))
            elif isinstance(event, h11.EndOfMessage):
                if self.rewrite is not None:
                    self._body(self.masker.feed(_rewritten(self.rewrite, None)))
                self._body(self.masker.flush(), final=True)
                self._end()
                await self.flush()
                return
            else:
                if stale_ok and not answered:
                    raise Stale()
                raise Refused(502, "the upstream closed the connection before answering")

    async def flush(self) -> None:
        if self._out:
            self.writer.write(bytes(self._out))
            self._out.clear()
            await self.writer.drain()

    def _respond(self, event: h11.Response) -> None:
        self.evidence.upstream_status = event.status_code
        received = list(event.headers)  # listed once
        if self.masker.active and _compressed(received):
            raise Refused(502, "the upstream sent a compressed answer, which cannot be checked for the secret")
        headers = [(k, self.masker.whole(v)) for k, v in received if k not in HOP_BY_HOP]
        if self.rewrite is not None:
            try:
                headers = self.rewrite.head(event.status_code, headers)
            except AnswerRefused as refused:
                raise Refused(502, str(refused), Refusal.UNCHECKED) from None
        if not self.keep:
            headers.append((b"connection", b"close"))
        response = h11.Response(status_code=event.status_code, headers=headers, reason=self.masker.whole(event.reason))
        if self.screen is not None:
            self.screen.head([value for _, value in headers] + [response.reason])
        guard = self.guard
        if guard is not None and guard.refused_key is not None and held_back(received):
            self._held = HeldAnswer(response, self.limits.max_checked_answer, guard)
        elif self.screen is not None:
            self._pending = response
        else:
            self._release(response)

    def _body(self, data: bytes, *, final: bool = False) -> None:
        """A masked piece of the body: screened, then held or sent."""
        if self.screen is not None:
            self.screen.scan(data, final=final)
        if self._held is not None:
            self._held.add(data)
        elif self._pending is not None:
            self._window += data
            hold = self.screen.hold if self.screen is not None else None
            if hold is None and len(self._window) > self.limits.max_checked_answer:
                raise Refused(
                    502,
                    f"an answer longer than {self.limits.max_checked_answer} bytes cannot be checked for credentials",
                    Refusal.UNCHECKED,
                )
            if hold is not None and len(self._window) > hold:
                self._release_pending()
        elif data:
            self._send(data)

    def _end(self) -> None:
        if self._held is not None:
            rest = self._held.check()  # refused when it holds the guarded key: nothing of it was sent
            self._release(self._held.response)
            if rest:
                self._send(rest)
        elif self._pending is not None:
            self._release_pending()
        self._out.extend(self.conn.send(h11.EndOfMessage()) or b"")

    def _release_pending(self) -> None:
        assert self._pending is not None
        self._release(self._pending)
        self._pending = None
        window, self._window = bytes(self._window), bytearray()
        if window:
            self._send(window)

    def _release(self, response: h11.Response) -> None:
        self._out.extend(self.conn.send(response) or b"")
        self.evidence.status = response.status_code

    def _send(self, data: bytes) -> None:
        self._out.extend(self.conn.send(h11.Data(data=data)) or b"")
        self.evidence.answer_bytes += len(data)


def _rewritten(rewrite: AnswerRewrite, data: bytes | None) -> bytes:
    """``data`` through ``rewrite`` (None: the body's end); what it cannot pass on is refused."""
    try:
        return rewrite.end() if data is None else rewrite.feed(data)
    except AnswerRefused as refused:
        raise Refused(502, str(refused), Refusal.UNCHECKED) from None


def _compressed(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    return any(k == b"content-encoding" and v.strip().lower() not in (b"", b"identity") for k, v in headers)
