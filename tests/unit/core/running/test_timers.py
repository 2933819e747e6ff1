"""The timers a running session's timed parts run on: a thread each (exec), or a gateway's one shared scheduler.

What the parts rely on: a step runs after ``first`` seconds and then as often
as it says, ``wake`` runs it at once, ``stop`` returns only once no step runs
any more (a renewal under way is finished, so the revocation after it sees
what it made), a step stopping its own timer does not wait for itself, and a
step that raises is tried again later instead of ending the timer. On the
shared scheduler a hundred timers run on its few workers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from broker.core.running import timers as timers_module
from broker.core.running.timers import OwnThreads, SharedTimers, Timers

pytestmark = pytest.mark.unit
WAIT = 10.0


@pytest.fixture(params=["own threads", "shared"])
def timers(request: pytest.FixtureRequest) -> Iterator[Timers]:
    if request.param == "own threads":
        yield OwnThreads()
        return
    shared = SharedTimers(workers=2)
    try:
        yield shared
    finally:
        shared.close()


def until(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def test_a_step_runs_as_often_as_it_says_until_it_is_done(timers: Timers) -> None:
    runs: list[float] = []

    def step() -> float | None:
        runs.append(time.monotonic())
        return 0.01 if len(runs) < 3 else None

    timers.start("t", step, 0.0)
    until(lambda: len(runs) == 3, "three runs")
    time.sleep(0.1)
    assert len(runs) == 3  # None: done


def test_wake_runs_it_now_and_stop_waits_for_the_step_under_way(timers: Timers) -> None:
    inside, release, finished = threading.Event(), threading.Event(), threading.Event()
    runs = [0]

    def step() -> float:
        runs[0] += 1
        if runs[0] == 1:
            inside.set()
            release.wait(WAIT)
            finished.set()
        return 3600.0

    timer = timers.start("t", step, 3600.0)
    timer.wake()
    assert inside.wait(WAIT)
    stopper = threading.Thread(target=timer.stop)
    stopper.start()
    time.sleep(0.1)
    assert stopper.is_alive() and not finished.is_set()  # stop waits for the step under way
    release.set()
    stopper.join(WAIT)
    assert not stopper.is_alive() and finished.is_set()
    timer.wake()
    time.sleep(0.1)
    assert runs[0] == 1  # stopped: woken or not, it never runs again


def test_a_step_may_stop_its_own_timer(timers: Timers) -> None:
    holder: list[object] = []
    done = threading.Event()

    def step() -> float:
        holder[0].stop()  # type: ignore[attr-defined]
        done.set()
        return 0.01

    holder.append(timers.start("t", step, 0.05))
    assert done.wait(WAIT)
    time.sleep(0.1)


def test_a_step_that_raises_is_tried_again(timers: Timers, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timers_module, "RETRY_AFTER", 0.01)
    runs = [0]

    def step() -> float | None:
        runs[0] += 1
        if runs[0] == 1:
            raise RuntimeError("a bug")
        return None

    timers.start("t", step, 0.0)
    until(lambda: runs[0] == 2, "the second run")


def test_a_hundred_sessions_timers_share_a_few_threads() -> None:
    shared = SharedTimers(workers=3)
    before = threading.active_count()
    counts = [0] * 100
    try:

        def stepper(index: int) -> object:
            def step() -> float | None:
                counts[index] += 1
                return 0.01 if counts[index] < 5 else None

            return step

        for index in range(100):
            shared.start(f"t{index}", stepper(index), 0.0)  # type: ignore[arg-type]
        until(lambda: all(count == 5 for count in counts), "every timer's five runs")
        assert threading.active_count() <= before + 3  # its workers; the scheduler was there before
    finally:
        shared.close()
