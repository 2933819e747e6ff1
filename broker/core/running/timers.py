"""How a running session's timed parts run: each in a thread of its own, or every session's on one shared scheduler.

A timed part (the standing's decision every ``policy_refresh``, the renewals
behind placeholders, the ``kind: secret`` refreshes) is a ``Step``: a function
that does what is due and returns how many seconds until it is due again
(None: nothing more to do). ``Timers.start`` runs a step after ``first``
seconds, then as it says; the ``Timer`` it returns is woken early with
``wake`` (a renewal asked for changed what is due) and ended with ``stop``,
which waits for a step under way: once it returns, the part does nothing more
for its session.

``OwnThreads`` gives each timer a thread of its own: what ``broker exec`` runs
(one session per process). ``SharedTimers`` runs the timers of every session a
gateway holds on one scheduler thread that hands each due step to a few
workers, so a thousand sessions cost a handful of threads, not three thousand.
A step that raises is logged and tried again ``RETRY_AFTER`` seconds later: one
session's bug never stops the others' timers.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

LOG = logging.getLogger("broker.running")
Step = Callable[[], float | None]
RETRY_AFTER = 60.0


class Timer(Protocol):
    def wake(self) -> None:
        """Run the step now (or right after the one under way)."""

    def stop(self) -> None:
        """No step after this returns (one under way is finished first)."""


class Timers(Protocol):
    def start(self, name: str, step: Step, first: float) -> Timer:
        """Run ``step`` in ``first`` seconds, then again as often as it says."""


def _guarded(name: str, step: Step) -> float | None:
    try:
        return step()
    except Exception:  # a bug in one part: logged, tried again later; the session goes on
        LOG.exception("%s: a timed step failed", name)
        return RETRY_AFTER


class _ThreadTimer:
    """One timer in a thread of its own."""

    def __init__(self, name: str, step: Step, first: float) -> None:
        self._step = step
        self._name = name
        self._first = first
        self._stopped = threading.Event()
        self._woken = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        delay: float | None = self._first
        while delay is not None:
            self._woken.wait(max(0.0, delay))
            self._woken.clear()
            if self._stopped.is_set():
                return
            delay = _guarded(self._name, self._step)

    def wake(self) -> None:
        self._woken.set()

    def stop(self) -> None:
        self._stopped.set()
        self._woken.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


class OwnThreads:
    """Each timer in a thread of its own (``broker exec``: one session per process)."""

    def start(self, name: str, step: Step, first: float) -> Timer:
        return _ThreadTimer(name, step, first)


class _SharedTimer:
    """One timer of a ``SharedTimers``: scheduled on its heap, its step run by one of its workers at a time."""

    def __init__(self, owner: SharedTimers, name: str, step: Step) -> None:
        self.owner = owner
        self.name = name
        self.step = step
        self.stopped = False
        self.due: float | None = None  # monotonic time it is scheduled for (None: running, or done)
        self.running = False
        self.runner: int | None = None  # the worker thread running its step
        self.woken = False  # woken while its step ran: run again at once
        self.idle = threading.Condition(owner.mutex)

    def wake(self) -> None:
        self.owner.schedule(self, 0.0, woken=True)

    def stop(self) -> None:
        with self.owner.mutex:
            self.stopped = True
            self.due = None
            while self.running and self.runner != threading.get_ident():  # its own step stopping it: no wait
                self.idle.wait()


class SharedTimers:
    """Every timer of a gateway's sessions: one scheduler thread, ``workers`` threads running the due steps."""

    def __init__(self, workers: int = 4, name: str = "session-timers") -> None:
        self.mutex = threading.Lock()
        self._due = threading.Condition(self.mutex)
        self._heap: list[tuple[float, int, _SharedTimer]] = []
        self._order = itertools.count()
        self._closed = False
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{name}-worker")
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def start(self, name: str, step: Step, first: float) -> Timer:
        timer = _SharedTimer(self, name, step)
        self.schedule(timer, first)
        return timer

    def schedule(self, timer: _SharedTimer, delay: float, *, woken: bool = False) -> None:
        with self.mutex:
            if timer.stopped or self._closed:
                return
            if timer.running:
                timer.woken = timer.woken or woken
                return
            at = time.monotonic() + max(0.0, delay)
            if timer.due is not None and timer.due <= at:
                return  # due sooner already
            timer.due = at
            heapq.heappush(self._heap, (at, next(self._order), timer))
            self._due.notify()

    def _run(self) -> None:
        with self.mutex:
            while not self._closed:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    at, _, timer = heapq.heappop(self._heap)
                    if timer.due != at or timer.stopped or timer.running:
                        continue  # rescheduled, stopped or already running: a stale entry
                    timer.due = None
                    timer.running = True
                    self._pool.submit(self._fire, timer)
                wait = self._heap[0][0] - now if self._heap else None
                self._due.wait(wait)

    def _fire(self, timer: _SharedTimer) -> None:
        with self.mutex:
            timer.runner = threading.get_ident()
        delay: float | None = None
        try:
            if not timer.stopped:
                delay = _guarded(timer.name, timer.step)
        finally:
            with self.mutex:
                timer.runner = None
                timer.running = False
                timer.idle.notify_all()
                again = 0.0 if timer.woken else delay
                timer.woken = False
            if again is not None:
                self.schedule(timer, again)

    def close(self) -> None:
        """Stop scheduling; wait for the steps under way."""
        with self.mutex:
            self._closed = True
            self._due.notify()
        self._thread.join()
        self._pool.shutdown(wait=True)
