"""The ``egress.request`` records on their way into the issuance log: a writer thread, batches, back-pressure.

The proxy's event loop never waits on the log: appending is synchronous
file I/O under a lock and an fsync (or a PostgreSQL transaction), so a
record is handed to ``EvidenceWriter.submit`` and a thread of its own
appends what has gathered in one go (``AppendLog.append_many``: one lock,
one write, one fsync for the whole batch), in the order the requests ended,
under the same hash chain and signatures as every other record. A batch
starts with the first record waiting and gathers for ``linger`` (50 ms)
more (group commit): each append costs a lock, an open, a read of the head
and an fsync whatever its size (about 0.3 ms of CPU, the fsync most of it:
as much as the proxy's own work on a small request), so at 1,000 requests/s
fifty records share them instead of one each. A record reaches the log at
most ``linger`` after its request ended, while the log keeps up.

Nothing is dropped. Memory is bounded by back-pressure on the proxy instead:
before a tunnel reads its next request it awaits ``room()``, which waits
while ``max_pending`` records are not yet written; a request under way always
gets its record (``submit`` never blocks and never refuses), so at most
``max_pending`` plus one per open connection wait at any time. When the log
cannot take records (a torn log, a store that is down) the batch is kept and
tried again, ``failing`` says why, and the proxy refuses new requests to
terminated hosts (fail closed) until it recovers. With ``room`` (the log's file
system, ``broker.audit.room``), a batch is not written once that file system
is down to the room kept for revoke and sweep: it waits like a failing log,
until the session ends and its last records get that room with its teardown.

What each record costs is the session's ``Ledger``
(``broker.egress.evidence.budget``): past the budget, refusals become
counted sums that this thread writes when their minute ends; past the hard
cap ``refusing`` says why the proxy answers 503, and one
``egress.evidence_exhausted`` record goes in. ``close`` writes what is left
(the open sums too) before the session's
revocation is logged.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from typing import Any

from broker.audit.log import GENESIS, AppendLog, Entry, canonical, new_record
from broker.audit.room import LogRoom
from broker.egress.evidence.budget import EXHAUSTED, EvidenceBudget, Ledger
from broker.vocab.errors import BrokerError

LOG = logging.getLogger("broker.egress")
EVENT = "egress.request"
EXHAUSTED_EVENT = "egress.evidence_exhausted"
FAILING = "the issuance log cannot take this request's record, so nothing is forwarded"
RETRY = 0.5  # seconds between attempts while the log cannot take records


class EvidenceWriter:
    """Appends one session's ``egress.request`` records from a thread of its own (see the module docstring)."""

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
    ) -> None:
        self.log = log
        self.session, self.task, self.requester = session, task, requester
        self.max_pending = max_pending
        self.max_batch = max_batch
        self.linger = linger
        self.failing: str | None = None
        self.log_room = room
        self.ledger = Ledger(budget or EvidenceBudget(), _overhead(session, task, requester))
        self._flushed = False  # the ledger's last sums are queued (once the writer closes)
        self.written = 0
        self.batches = 0
        self.peak = 0  # the most records ever waiting at once (the bench reads it)
        self._queue: collections.deque[Entry] = collections.deque()
        self._pending = 0  # submitted and not yet written
        self._cond = threading.Condition()
        self._closing = False
        self._deadline: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._space: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="egress-evidence", daemon=True)
        self._thread.start()

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
                self._cond.notify()  # a sum opened: the writer times the end of its minute

    def _add(self, event: str, fields: dict[str, Any]) -> None:
        """Queue one record (the lock held)."""
        self._queue.append(Entry(event, self.session, self.task, self.requester, fields))
        self._pending += 1
        self.peak = max(self.peak, self._pending)
        if len(self._queue) in (1, self.max_batch):  # the writer waits for the first, or lingers for more
            self._cond.notify()

    @property
    def pending(self) -> int:
        with self._cond:
            return self._pending

    # -- the writer thread ---------------------------------------------------------------------

    def _take(self) -> list[Entry] | None:
        """The next batch: what waits once the first record has lingered ``linger`` seconds (or a full batch)."""
        with self._cond:
            while True:
                for fields in self.ledger.due(time.time()):  # the sums whose minute has ended
                    self._add(EVENT, fields)
                if self._queue or self._closing:
                    break
                due = self.ledger.next_due()
                self._cond.wait(None if due is None else max(0.0, due - time.time()) + 0.01)
            if self._closing and not self._flushed:
                self._flushed = True
                for fields in self.ledger.rest(time.time()):
                    self._add(EVENT, fields)
            if not self._queue:
                return None
            deadline = time.monotonic() + self.linger
            while len(self._queue) < self.max_batch and not self._closing:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            count = min(len(self._queue), self.max_batch)
            return [self._queue.popleft() for _ in range(count)]

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            while True:
                try:
                    self._make_room()
                    self.log.append_many(batch)
                except (BrokerError, OSError) as exc:
                    self.failing = getattr(exc, "message", None) or type(exc).__name__
                    LOG.error("egress evidence: the issuance log cannot take records (%s); retrying", self.failing)
                    if self._gave_up():
                        self._requeue(batch)
                        return
                    time.sleep(RETRY)
                    continue
                break
            self.failing = None
            self.written += len(batch)
            self.batches += 1
            with self._cond:
                self._pending -= len(batch)
                room = self._pending < self.max_pending
                self._cond.notify_all()
            if room and self._loop is not None and self._space is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                    self._loop.call_soon_threadsafe(self._space.set)

    def _make_room(self) -> None:
        """While the session runs, its evidence stays out of the room kept for revoke and sweep; once it ends, what
        is left is part of its teardown and gets that room, as its revocation does."""
        if self.log_room is None:
            return
        if self._closing:
            self.log_room.release()
        else:
            self.log_room.check_evidence()

    def _gave_up(self) -> bool:
        with self._cond:
            return self._closing and self._deadline is not None and time.monotonic() > self._deadline

    def _requeue(self, batch: list[Entry]) -> None:
        with self._cond:
            self._queue.extendleft(reversed(batch))
            self._cond.notify_all()

    def close(self, timeout: float = 30.0) -> int:
        """Write what is left (trying for up to ``timeout`` while the log fails); how many records were not."""
        with self._cond:
            self._closing = True
            self._deadline = time.monotonic() + timeout
            self._cond.notify_all()
        self._thread.join(timeout + RETRY + 5)
        with self._cond:
            lost = self._pending
        if lost:
            LOG.error("egress evidence: %d egress.request records could not be written to the issuance log", lost)
        return lost


def _overhead(session: str, task: str, requester: str) -> int:
    """What a record adds to its fields' canonical JSON: the common fields, the comma joining them, the newline
    (the braces of an empty record stand for those two)."""
    return len(canonical(new_record(10**9, GENESIS, EVENT, session, task, requester, {})))
