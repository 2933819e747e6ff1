"""The thread that writes ``egress.request`` records into the issuance log, for one session's writer or for many.

Appending is synchronous file I/O under a lock and an fsync (or a PostgreSQL
transaction), so the proxies' event loop never does it: each session's
``EvidenceWriter`` (``broker.egress.evidence.writer``) queues its records, and
a pump appends what has gathered, from every writer it serves, in one go
(``AppendLog.append_many``: one lock, one write, one fsync for the whole
batch), each session's records in the order its requests ended, under the
same hash chain and signatures as every other record. A batch starts with the
first record waiting and gathers for ``linger`` (50 ms) more (group commit):
each append costs a lock, an open, a read of the head and an fsync whatever
its size (about 0.3 ms of CPU, the fsync most of it: as much as the proxy's
own work on a small request), so at 1,000 requests/s fifty records share them
instead of one each. A record reaches the log at most ``linger`` after its
request ended, while the log keeps up.

``broker exec`` runs one session: its writer makes a pump of its own
(``single``), which ends with it. A gateway holds many: one pump serves them
all, so a thousand sessions cost one writer thread, and their records share
the fsyncs too.

When the log cannot take records (a torn log, a store that is down) the batch
is kept and tried again every ``RETRY`` seconds; each writer in it says why
(``failing``), so its proxy refuses new requests to terminated hosts (fail
closed) until it recovers. With a ``room`` (the log's file system,
``broker.audit.room``), a batch is not written once that file system is down
to the room kept for revoke and sweep, while every writer in it still runs:
it waits like a failing log; once a session ends, what is left is part of its
teardown and gets that room, as its revocation does. A writer that closes
while its records cannot be written is given up after its ``close`` timeout:
its records are counted as lost (``close`` says how many).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING

from broker.audit.log import AppendLog, Entry
from broker.audit.room import LogRoom
from broker.vocab.errors import BrokerError

if TYPE_CHECKING:
    from broker.egress.evidence.writer import EvidenceWriter

LOG = logging.getLogger("broker.egress")
RETRY = 0.5  # seconds between attempts while the log cannot take records

Batch = list[tuple["EvidenceWriter", list[Entry]]]


class EvidencePump:
    """Appends the records of its writers to ``log`` from one thread (see the module docstring)."""

    def __init__(
        self,
        log: AppendLog,
        *,
        room: LogRoom | None = None,
        max_batch: int = 1024,
        linger: float = 0.05,
        single: bool = False,
    ) -> None:
        self.log = log
        self.room = room
        self.max_batch = max_batch
        self.linger = linger
        self.cond = threading.Condition()  # guards every writer's queue and counts as well as the pump's own
        self._single = single  # one writer's own pump: it ends once that writer is closed
        self._writers: set[EvidenceWriter] = set()
        # What the pump looks at, so that its work per batch follows the writers with something to do, never the
        # number of sessions: writers with records queued (in the order they queued their first), writers with a
        # sum open (its minute's end to watch), writers closing.
        self._ready: dict[EvidenceWriter, None] = {}
        self._timed: set[EvidenceWriter] = set()
        self._closing: set[EvidenceWriter] = set()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="egress-evidence", daemon=True)
        self._thread.start()

    @property
    def writers(self) -> int:
        with self.cond:
            return len(self._writers)

    def join(self, writer: EvidenceWriter) -> None:
        with self.cond:
            if self._closed:
                raise RuntimeError("the evidence pump is closed")
            self._writers.add(writer)

    # -- told by the writers (the lock held) ----------------------------------------------------

    def queued(self, writer: EvidenceWriter, count: int) -> None:
        """``writer`` has ``count`` records queued now: the first wakes the pump, as a full batch does."""
        if count == 1:
            self._ready[writer] = None
        if count in (1, self.max_batch):
            self.cond.notify_all()

    def timed(self, writer: EvidenceWriter) -> None:
        """``writer`` opened a sum: the pump times the end of its minute."""
        self._timed.add(writer)
        self.cond.notify_all()

    def closing(self, writer: EvidenceWriter) -> None:
        self._closing.add(writer)
        self.cond.notify_all()

    def close(self) -> None:
        """Stop once every writer is closed (a shared pump; a single one stops with its writer)."""
        with self.cond:
            self._closed = True
            self.cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def wait_for(self, writer: EvidenceWriter, until: float) -> None:
        """Wait (the lock held) until the pump is done with a closing ``writer``, or ``until`` (monotonic)."""
        while not writer.done and time.monotonic() < until:
            self.cond.wait(until - time.monotonic())
        self._forget(writer)
        if self._single:
            self._closed = True
            self.cond.notify_all()

    def end_single(self) -> None:
        """A single pump's writer closed: wait for its thread."""
        if self._single and self._thread is not threading.current_thread():
            self._thread.join(RETRY + 5)

    def _forget(self, writer: EvidenceWriter) -> None:
        self._writers.discard(writer)
        self._ready.pop(writer, None)
        self._timed.discard(writer)
        self._closing.discard(writer)

    # -- the pump's thread --------------------------------------------------------------------

    def _take(self) -> Batch | None:
        """The next batch: what waits once the first record has lingered ``linger`` seconds (or a full batch)."""
        with self.cond:
            while True:
                now = time.time()
                for writer in [*self._timed, *self._closing]:
                    if not writer.done:
                        writer.take_due(now)  # the sums whose minute has ended; a closing writer's last ones
                    if writer.ledger.next_due() is None:
                        self._timed.discard(writer)
                if self._ready:
                    break
                self._retire()
                if self._closed and not self._writers:
                    return None
                dues = [due for writer in self._timed if (due := writer.ledger.next_due()) is not None]
                self.cond.wait(None if not dues else max(0.0, min(dues) - time.time()) + 0.01)
            deadline = time.monotonic() + self.linger
            while self._waiting() < self.max_batch and not (self._closed or self._closing):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.cond.wait(remaining)
            batch: Batch = []
            room = self.max_batch
            for writer in list(self._ready):
                if room <= 0:
                    break
                entries = writer.take(room)
                if not writer.queued:
                    del self._ready[writer]
                if entries:
                    batch.append((writer, entries))
                    room -= len(entries)
            return batch

    def _waiting(self) -> int:
        return sum(writer.queued for writer in self._ready)

    def _retire(self) -> None:
        """Writers that are closing with nothing left to write are done (the lock held)."""
        for writer in self._closing:
            if writer.flushed and writer.pending_locked == 0:
                writer.done = True
        self.cond.notify_all()

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            while batch:
                try:
                    self._make_room(batch)
                    self.log.append_many([entry for _, entries in batch for entry in entries])
                except (BrokerError, OSError) as exc:
                    why = getattr(exc, "message", None) or type(exc).__name__
                    LOG.error("egress evidence: the issuance log cannot take records (%s); retrying", why)
                    batch = self._give_up(batch, why)
                    if batch:
                        time.sleep(RETRY)
                    continue
                self._written(batch)
                break

    def _make_room(self, batch: Batch) -> None:
        """While every session of the batch runs, its evidence stays out of the room kept for revoke and sweep; a
        batch with the last records of a session that ended is part of its teardown and gets that room."""
        if self.room is None:
            return
        if any(writer.closing for writer, _ in batch):
            self.room.release()
        else:
            self.room.check_evidence()

    def _give_up(self, batch: Batch, why: str) -> Batch:
        """Each writer of the batch says why its records wait; those closing past their deadline are given up (their
        records go back to their queue, counted as lost). What is still to be tried."""
        kept: Batch = []
        with self.cond:
            for writer, entries in batch:
                writer.failing = why
                if writer.closing and writer.deadline is not None and time.monotonic() > writer.deadline:
                    writer.requeue(entries)
                    writer.done = True
                    self._ready.pop(writer, None)
                else:
                    kept.append((writer, entries))
            self.cond.notify_all()
        return kept

    def _written(self, batch: Batch) -> None:
        woken = []
        with self.cond:
            for writer, entries in batch:
                writer.failing = None
                writer.written += len(entries)
                writer.batches += 1
                if writer.wrote(len(entries)):
                    woken.append(writer)
            self._retire()
        for writer in woken:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                writer.wake_proxy()
