"""One session's ``egress.request`` records on their way into the issuance log: its queue, its budget, back-pressure.

The proxy's event loop never waits on the log: a record is handed to
``EvidenceWriter.submit`` and a pump (``broker.egress.evidence.pump``: a
thread of the writer's own, or one a gateway shares between its sessions)
appends what has gathered, in batches, under the same hash chain and
signatures as every other record.

Nothing is dropped. Memory is bounded by back-pressure on the proxy instead:
before a tunnel reads its next request it awaits ``room()``, which waits
while ``max_pending`` records are not yet written; a request under way always
gets its record (``submit`` never blocks and never refuses), so at most
``max_pending`` plus one per open connection wait at any time. When the log
cannot take records (a torn log, a store that is down, the log's file system
down to the room kept for revoke and sweep) the pump keeps them and tries
again, ``failing`` says why, and the proxy refuses new requests to terminated
hosts (fail closed) until it recovers.

What each record costs is the session's ``Ledger``
(``broker.egress.evidence.budget``): past the budget, refusals become
counted sums that the pump writes when their minute ends; past the hard
cap ``refusing`` says why the proxy answers 503, and one
``egress.evidence_exhausted`` record goes in. ``close`` writes what is left
(the open sums too) before the session's revocation is logged.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any

from broker.audit.log import GENESIS, AppendLog, Entry, canonical, new_record
from broker.audit.room import LogRoom
from broker.egress.evidence.budget import EXHAUSTED, EvidenceBudget, Ledger
from broker.egress.evidence.pump import RETRY, EvidencePump

LOG = logging.getLogger("broker.egress")
EVENT = "egress.request"
EXHAUSTED_EVENT = "egress.evidence_exhausted"
FAILING = "the issuance log cannot take this request's record, so nothing is forwarded"

__all__ = ["EVENT", "EXHAUSTED_EVENT", "FAILING", "RETRY", "EvidenceWriter"]


class EvidenceWriter:
    """One session's ``egress.request`` records, appended by ``pump`` (None: a pump of its own, for this writer
    alone: ``log``, ``room``, ``max_batch`` and ``linger`` are its; a shared pump has its own)."""

    def __init__(
        self,
        log: AppendLog,
        *,
        session: str,
        task: str,
        requester: str,
        budget: EvidenceBudget | None = None,
        room: LogRoom | None = None,
        max_pending: int = 4096,
        max_batch: int = 1024,
        linger: float = 0.05,
        pump: EvidencePump | None = None,
    ) -> None:
        self.session, self.task, self.requester = session, task, requester
        self.max_pending = max_pending
        self.failing: str | None = None
        self.ledger = Ledger(budget or EvidenceBudget(), _overhead(session, task, requester))
        self.written = 0
        self.batches = 0
        self.peak = 0  # the most records ever waiting at once (the bench reads it)
        self.closing = False
        self.flushed = False  # the ledger's last sums are queued (once the writer closes)
        self.done = False  # the pump has nothing more to do for it (everything written, or given up)
        self.deadline: float | None = None  # when a closing writer's records are given up while the log fails
        self._queue: collections.deque[Entry] = collections.deque()
        self._pending = 0  # submitted and not yet written
        self._loop: asyncio.AbstractEventLoop | None = None
        self._space: asyncio.Event | None = None
        self.pump = pump or EvidencePump(log, room=room, max_batch=max_batch, linger=linger, single=True)
        self._cond = self.pump.cond
        self.pump.join(self)

    # -- the proxy's side (its event loop) ---------------------------------------------------

    async def room(self) -> None:
        """Wait until fewer than ``max_pending`` records wait to be written."""
        if self._pending < self.max_pending:  # the same momentary look as under the lock, without taking it
            return
        if self._space is None:
            self._loop = asyncio.get_running_loop()
            self._space = asyncio.Event()
        while True:
            with self._cond:
                if self._pending < self.max_pending:
                    return
                self._space.clear()
            await self._space.wait()

    def refusing(self) -> str | None:
        """Why the proxy must refuse the next request to a terminated host (503), or None: a log that cannot
        take its record, or a session past its evidence cap."""
        if self.failing is not None:
            return FAILING
        return EXHAUSTED if self.ledger.exhausted else None

    def submit(self, fields: dict[str, Any]) -> None:
        """Hand over one request's record (never blocks, never refuses: ``room`` is where the proxy waits); the
        ledger decides whether it is written as it is or counted in a sum."""
        now = time.time()
        with self._cond:
            opened = self.ledger.opened
            if self.ledger.admit(fields, now):
                self._add(EVENT, fields)
            note = self.ledger.exhausted_note()
            if note is not None:
                LOG.warning("egress evidence: session %s reached its evidence cap; its proxy now refuses", self.session)
                self._add(EXHAUSTED_EVENT, note)
            if self.ledger.opened != opened:
                self.pump.timed(self)  # a sum opened: the pump times the end of its minute

    def _add(self, event: str, fields: dict[str, Any]) -> None:
        """Queue one record (the lock held)."""
        self._queue.append(Entry(event, self.session, self.task, self.requester, fields))
        self._pending += 1
        self.peak = max(self.peak, self._pending)
        self.pump.queued(self, len(self._queue))  # the pump waits for the first, or lingers for more

    @property
    def pending(self) -> int:
        with self._cond:
            return self._pending

    # -- the pump's side (its thread, the lock held) -------------------------------------------

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def pending_locked(self) -> int:
        return self._pending

    def take_due(self, now: float) -> None:
        """Queue the sums whose minute has ended, and, once closing, every sum still open."""
        for fields in self.ledger.due(now):
            self._add(EVENT, fields)
        if self.closing and not self.flushed:
            self.flushed = True
            for fields in self.ledger.rest(now):
                self._add(EVENT, fields)

    def take(self, most: int) -> list[Entry]:
        count = min(len(self._queue), most)
        return [self._queue.popleft() for _ in range(count)]

    def requeue(self, entries: list[Entry]) -> None:
        self._queue.extendleft(reversed(entries))  # (given up: the pump takes nothing more of it)

    def wrote(self, count: int) -> bool:
        """``count`` records were written; whether the proxy may be waiting for room now."""
        self._pending -= count
        return self._pending < self.max_pending and self._loop is not None and self._space is not None

    def wake_proxy(self) -> None:
        """Tell the proxy's loop there is room (from the pump's thread)."""
        if self._loop is not None and self._space is not None:
            self._loop.call_soon_threadsafe(self._space.set)

    # -- the end -----------------------------------------------------------------------------

    def close(self, timeout: float = 30.0) -> int:
        """Write what is left (trying for up to ``timeout`` while the log fails); how many records were not."""
        with self._cond:
            self.closing = True
            self.deadline = time.monotonic() + timeout
            self.pump.closing(self)
            self.pump.wait_for(self, time.monotonic() + timeout + RETRY + 5)
            lost = self._pending
        self.pump.end_single()
        if lost:
            LOG.error("egress evidence: %d egress.request records could not be written to the issuance log", lost)
        return lost


def _overhead(session: str, task: str, requester: str) -> int:
    """What a record adds to its fields' canonical JSON: the common fields, the comma joining them, the newline
    (the braces of an empty record stand for those two)."""
    return len(canonical(new_record(10**9, GENESIS, EVENT, session, task, requester, {})))
