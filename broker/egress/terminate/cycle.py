"""One request cycle through a terminated host, from its head to its evidence record.

The steps, in order; each may refuse, and a refused request sends nothing upstream:

1. the session is not revoked, and the evidence log takes records (the session's evidence cap not reached);
2. one framing of the body (``terminate.framing``); the guards (``terminate.guards``): the tunnel's own ``Host``,
   an origin-form target, no routing headers, no method or path override; for a credential's host, none of the
   headers its provider's guard takes out (Vault: response wrapping);
3. the operations decision (``OperationsChecker``) on the head, or, when the body decides (a push's ref updates,
   a GraphQL document, a review), on the body: it is read and held (within the check's bound, ``100 Continue``
   sent first when the client waits for it) until the decision comes; a refusal is the check's own answer (git's
   report-status, GitHub's 403 JSON, a line of text), after which the rest of the body is read and dropped (at
   most ``max_discarded_body``) so the client reads the answer and the connection serves the next request, or
   the connection is closed (``broker.egress.operations``, through the ``Interceptor``);
4. the credential step: the first injector of the host that takes the request
   (``broker.egress.injectors.interface``) gives the passage its head and body go upstream through;
5. forward on the tunnel's kept upstream connection, the head framed by the proxy (never with the client's
   framing headers), the rest of the body streamed while the answer is relayed (an upstream may answer early);
   a passage whose head waits for the body sends nothing, not even the head, before the body checked; the
   answer (``broker.egress.terminate.relay``) has its secrets turned into their stand-ins (``Masker``), a
   guarded host's JSON answer is held and checked for the key its guard refuses (Vault: a wrapping token), and
   a passage's screen reads it (the AWS re-signer: no credentials the session does not own);
6. the ``egress.request`` record (``broker.egress.evidence.record``), handed to the evidence writer whatever
   happened.

``run`` returns whether the client's connection may carry another request. A refusal is counted on the session's
``Gate`` (its ``egress.refused`` records); the upstream connection is opened through it too. Nothing here calls
back into the listener.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

import h11

from broker.egress.allowlist.gate import Gate
from broker.egress.evidence.record import Evidence
from broker.egress.evidence.writer import EvidenceWriter
from broker.egress.exchange.refusals import REVOKED, Refusal, Refused
from broker.egress.exchange.streams import HOP_BY_HOP, next_event
from broker.egress.injectors.interface import (
    Header,
    HeadOnly,
    InjectionRefused,
    Passage,
    RequestHead,
    answer_screen,
)
from broker.egress.operations import Answer, BodyCheck, Decision
from broker.egress.operations.decision import AnswerRewrite
from broker.egress.terminate.answers import send_answer, send_continue, text_answer
from broker.egress.terminate.framing import Framing, declared, framed
from broker.egress.terminate.guards import checked_headers
from broker.egress.terminate.interceptor import Interceptor
from broker.egress.terminate.masking import Masker
from broker.egress.terminate.outgoing import Outgoing
from broker.egress.terminate.relay import Relay, Stale
from broker.egress.terminate.upstream import UpstreamLink


@dataclass(frozen=True)
class Site:
    """The authority a terminated exchange is for; ``keep``: the client's connection may carry more requests."""

    host: str
    port: int
    keep: bool = True


class Cycle:
    """One request on a terminated connection (see the module docstring)."""

    def __init__(
        self,
        gate: Gate,
        interceptor: Interceptor,
        site: Site,
        link: UpstreamLink,
        streams: tuple[h11.Connection, asyncio.StreamReader, asyncio.StreamWriter],
        request: h11.Request,
        evidence: Evidence,
        sink: EvidenceWriter | None,
    ) -> None:
        self.gate, self.interceptor, self.site, self.link = gate, interceptor, site, link
        self.conn, self.reader, self.writer = streams
        self.request = request
        self.headers = list(request.headers)  # listed once: every step reads the head's (name, value) pairs
        self.framing: Framing | None = None  # the body's one framing, once ``declared`` found it
        self.evidence = evidence
        self.sink = sink
        self.limits = gate.limits
        self.forwarding = False
        self.rewrite: AnswerRewrite | None = None  # what the answer goes through, when the operations ask

    async def run(self) -> bool:
        try:
            return await self._run()
        finally:
            if self.sink is not None:
                self.sink.submit(self.evidence.fields())

    async def _run(self) -> bool:
        host, port = self.site.host, self.site.port
        try:
            if self.interceptor.revoked:  # the host's own refusal (AWS: its SDKs' XML error), else a line of text
                head = RequestHead(self.request.method, self.request.target, tuple(self.headers))
                answer = self.interceptor.revoked_answer(host, port, head) or text_answer(403, REVOKED)
                self.evidence.refused(REVOKED)
                self._answer(answer)
                return False
            if self.sink is not None and (why := self.sink.refusing()) is not None:
                raise Refused(503, why)  # the log cannot take the record, or the session's evidence is used up
            self.framing = declared(self.headers, self.request.http_version)  # one framing of the body, or 400
            headers = checked_headers(self.request.target, self.headers, host, port)  # the tunnel's own host, or 400
            guard = self.interceptor.answer_guard(host, port)
            if guard is not None:
                headers = guard.without_stripped(headers)
            step = self.interceptor.decide(host, port, self.request.method, self.request.target, headers)
            held: list[bytes] = []
            if step is not None and not isinstance(step, Decision):
                send_continue(self.conn, self.writer)
                step, held = await self._hold(step)
            self.evidence.decided(step)
            self.rewrite = step.rewrite if step is not None else None
            if step is not None and not step.allowed:
                assert step.answer is not None
                return await self._refuse(step.answer)
            return await self._forward(headers, held)
        except Refused as refused:
            if refused.why is not None:
                self.gate.count_refusal(host, port, Refusal(refused.why))
            if self.forwarding and refused.why is None:
                self.evidence.failure = refused.reason
            else:
                self.evidence.refused(refused.reason)
            self._answer(text_answer(refused.status, refused.reason))
            return False
        except InjectionRefused as refused:  # mid-body, or its answer: no whole request or answer, the connection ends
            self.gate.count_refusal(host, port, _kind(refused))
            self.evidence.refused(refused.reason)
            self._answer(refused.answer)
            return False
        except h11.RemoteProtocolError:
            self.gate.count_refusal(host, port, Refusal.MALFORMED)
            self.evidence.refused("malformed request")
            self._answer(text_answer(400, "malformed request"))
            return False
        except (OSError, TimeoutError) as exc:  # the client went away, or stopped sending
            self.evidence.failure = f"the client's connection ended ({type(exc).__name__})"
            return False

    def _answer(self, answer: Answer, *, close: bool = True) -> bool:
        sent = send_answer(self.conn, self.writer, answer, close=close)
        if sent:
            self.evidence.status = answer.status
            self.evidence.answer_bytes = len(answer.body)
        return sent

    # -- the body, when it decides ---------------------------------------------------------------

    async def _body_event(self) -> h11.Data | h11.EndOfMessage:
        event = await next_event(self.conn, self.reader, self.limits.idle_timeout, self.limits.body_chunk)
        self._body_seen(event)
        assert isinstance(event, h11.Data | h11.EndOfMessage)
        return event

    def _buffered(self) -> list[bytes]:
        """The body's pieces h11 holds already, read with the head (a small request arrives whole): taken without
        waiting, so they go upstream with the head, in one write, and a request all here needs no second task."""
        pieces: list[bytes] = []
        while self.conn.their_state is h11.SEND_BODY:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                break
            self._body_seen(event)
            if isinstance(event, h11.Data):
                pieces.append(event.data)
        return pieces

    def _body_seen(self, event: object) -> None:
        """A body event the client sent, on its record; ``Refused`` (400) for one that ends the connection."""
        if isinstance(event, h11.Data):
            self.evidence.body(event.data)
        elif isinstance(event, h11.EndOfMessage):
            self.evidence.body_complete = True
        else:
            raise Refused(400, "the client closed the connection inside the request body")

    @property
    def _has_body(self) -> bool:
        return self.framing is not None and self.framing.length != 0  # checked on arrival

    async def _hold(self, check: BodyCheck) -> tuple[Decision, list[bytes]]:
        """Read and hold the body until ``check`` decides (it refuses past its bound, so memory stays bounded)."""
        held: list[bytes] = []
        while True:
            event = await self._body_event()
            if isinstance(event, h11.EndOfMessage):
                return check.end(), held
            held.append(event.data)
            decision = check.feed(event.data)
            if decision is not None:
                return decision, held

    async def _refuse(self, answer: Answer) -> bool:
        """Answer a refusal; then drop the rest of the body to keep the connection, or close it."""
        waiting = self.conn.their_state is h11.SEND_BODY and self.conn.they_are_waiting_for_100_continue
        close = not self.site.keep or waiting  # a client still waiting for 100 might send its body anyway
        self._answer(answer, close=close)
        await self.writer.drain()
        return False if close else await self._settle()

    async def _settle(self) -> bool:
        """Whether the connection may carry another request; the rest of a body is read and dropped first."""
        if not self.site.keep:
            return False
        dropped = 0
        while self.conn.their_state is h11.SEND_BODY:
            try:
                event = await self._body_event()
            except (Refused, OSError, TimeoutError, h11.RemoteProtocolError):
                return False
            if isinstance(event, h11.Data):
                dropped += len(event.data)
                if dropped > self.limits.max_discarded_body:
                    return False
        return self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE

    # -- forwarding --------------------------------------------------------------------------------

    def _passage(self, headers: list[Header]) -> tuple[Passage | Answer, list[Header]]:
        """The credential step: the first injector of the host that takes the request, or the request as it is."""
        mine = self.interceptor.injectors(self.site.host, self.site.port)
        # No compression where a secret goes, nor where the answer is rewritten: the answer's body is read.
        plain = bool(mine) or self.rewrite is not None
        kept = [(k, v) for k, v in headers if k not in HOP_BY_HOP and not (plain and k == b"accept-encoding")]
        head = RequestHead(self.request.method, self.request.target, tuple(kept))
        for injector in mine:
            try:
                began = injector.begin(head)
            except InjectionRefused:
                self.evidence.credential = injector.credential or None  # the credential that refused it
                raise
            if began is None:
                continue
            self.evidence.credential = injector.credential or None
            return began, kept
        return HeadOnly(head), kept

    async def _forward(self, headers: list[Header], held: list[bytes]) -> bool:
        try:
            passage, kept = self._passage(headers)
        except InjectionRefused as refused:  # on the head: nothing went upstream, the connection may go on
            self.gate.count_refusal(self.site.host, self.site.port, _kind(refused))
            self.evidence.refused(refused.reason)
            return await self._refuse(refused.answer)
        if isinstance(passage, Answer):
            self.evidence.refused(f"credential {self.evidence.credential}: refused by its injector")
            return await self._refuse(passage)
        try:
            swapped = passage.head.headers if passage.head is not None else ()
            masker = self.interceptor.masker(self.site.host, self.site.port, kept, swapped)
            self.forwarding = True
            retry = isinstance(passage, HeadOnly) and not self._has_body
            for attempt in (1, 2):
                reused = await self.link.ensure()
                try:
                    await self._exchange(passage, held, masker, stale_ok=retry and reused and attempt == 1)
                    break
                except Stale:
                    await self.link.close()
        finally:
            passage.close()
        await self.link.finish()
        return await self._settle()

    async def _exchange(self, passage: Passage, held: list[bytes], masker: Masker, *, stale_ok: bool) -> None:
        link = self.link
        assert link.conn is not None and link.writer is not None and link.reader is not None
        send_continue(self.conn, self.writer)
        screen = answer_screen(passage)
        guard = self.interceptor.answer_guard(self.site.host, self.site.port)
        client = (self.conn, self.writer)
        answer = Relay(
            client, self.evidence, self.limits, masker, keep=self.site.keep, guard=guard, screen=screen,
            rewrite=self.rewrite,
        )  # fmt: skip
        if self.conn.their_state is h11.SEND_BODY:
            held = held + self._buffered()  # what came with the head goes with it, in one write
        if not self._has_body or self.conn.their_state is not h11.SEND_BODY:
            try:  # the whole request is here: send it, then read the answer (no second task needed)
                await self._pump(passage, held, link.conn, link.writer)
                await answer.run(link.conn, link.reader, stale_ok)
            except BaseException:
                await link.close()
                raise
            return
        pump = asyncio.create_task(self._pump(passage, held, link.conn, link.writer))
        relay = asyncio.create_task(answer.run(link.conn, link.reader, stale_ok))
        try:
            done, _ = await asyncio.wait({pump, relay}, return_when=asyncio.FIRST_EXCEPTION)
            for task in (pump, relay):
                if task in done and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            if relay in done and not pump.done():
                pump.cancel()  # the upstream answered before the whole body went: the link is not kept
            else:
                await relay
        except BaseException:
            await link.close()
            raise
        finally:
            for task in (pump, relay):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
                elif not task.cancelled():
                    task.exception()  # one ended by the link's close (the other one's failure) is not reported lost

    async def _pump(self, passage: Passage, held: list[bytes], up: h11.Connection, out: asyncio.StreamWriter) -> None:
        """The head and body upstream through the passage: what was held, then the rest as it arrives. What is
        ready goes in one write (one TLS record, one system call, where a small request is all ready at once); a
        large piece goes as it is, framed by h11 but not copied (``send_with_data_passthrough``, ``Outgoing``);
        a spooled chunk's pieces go as they are read, a write each ``body_chunk``, never gathered whole."""
        ready = Outgoing()
        if passage.head is not None:
            ready.add(up.send(_request(passage.head)))

        async def flush() -> None:
            if ready:
                out.writelines(ready.take())
                await out.drain()

        async def send(pieces: Iterable[bytes]) -> None:
            for piece in pieces:
                ready.extend(up.send_with_data_passthrough(h11.Data(data=piece)) if piece else None)
                if ready.size >= self.limits.body_chunk:
                    await flush()

        for piece in held:
            await send(passage.feed(piece))
        while self.conn.their_state is h11.SEND_BODY:
            await flush()
            event = await self._body_event()
            if isinstance(event, h11.Data):
                await send(passage.feed(event.data))
        ending = passage.end()
        if ending.head is not None:
            ready.add(up.send(_request(ending.head)))
        await send(ending.pieces)
        ready.add(up.send(h11.EndOfMessage()))
        await flush()


def _request(head: RequestHead) -> h11.Request:
    """The request upstream: ``head`` framed by the proxy (the framing its headers declare, written anew)."""
    return h11.Request(method=head.method, target=head.target, headers=framed(head.headers, declared(head.headers)))


def _kind(refused: InjectionRefused) -> Refusal:
    """The ``egress.refused`` reason of an injector's refusal (``credential`` unless it names another)."""
    try:
        return Refusal(refused.why)
    except ValueError:
        return Refusal.CREDENTIAL
