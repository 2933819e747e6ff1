"""The ``egress.request`` records on their way into the issuance log: a writer thread, batches, back-pressure.

The proxy's event loop never waits on the log: appending is synchronous
file I/O under a lock and an fsync (or a PostgreSQL transaction), so a
record is handed to ``EvidenceWriter.submit`` and a thread of its own
appends what has gathered in one go (``AppendLog.append_many``: one lock,
one write, one fsync for the whole batch), in the order the requests ended,
under the same hash chain and signatures as every other record. A batch
starts with the first record waiting and gathers for ``linger`` (10 ms)
more (group commit): each append costs a lock, an open, a read of the head
and an fsync whatever its size, so at 1,000 requests/s ten records share
them instead of one each.

Nothing is dropped. Memory is bounded by back-pressure on the proxy instead:
before a tunnel reads its next request it awaits ``room()``, which waits
while ``max_pending`` records are not yet written; a request under way always
gets its record (``submit`` never blocks and never refuses), so at most
``max_pending`` plus one per open connection wait at any time. When the log
cannot take records (a torn log, a store that is down) the batch is kept and
tried again, ``failing`` says why, and the proxy refuses new requests to
terminated hosts (fail closed) until it recovers. ``close`` writes what is
left before the session's revocation is logged.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from typing import Any

from broker.audit.log import AppendLog, Entry
from broker.vocab.errors import BrokerError

LOG = logging.getLogger("broker.egress")
EVENT = "egress.request"
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
        max_pending: int = 4096,
        max_batch: int = 1024,
        linger: float = 0.01,
    ) -> None:
        self.log = log
        self.session, self.task, self.requester = session, task, requester
        self.max_pending = max_pending
        self.max_batch = max_batch
        self.linger = linger
        self.failing: str | None = None
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
        if self._space is None:
            self._loop = asyncio.get_running_loop()
            self._space = asyncio.Event()
        while True:
            with self._cond:
                if self._pending < self.max_pending:
                    return
                self._space.clear()
            await self._space.wait()

    def submit(self, fields: dict[str, Any]) -> None:
        """Queue one record (never blocks, never refuses: ``room`` is where the proxy waits)."""
        entry = Entry(EVENT, self.session, self.task, self.requester, fields)
        with self._cond:
            self._queue.append(entry)
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
            while not self._queue and not self._closing:
                self._cond.wait()
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
