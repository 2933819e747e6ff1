"""Independent IAM reads sent at once: at real latency each is a round trip, and none waits for another.

A reservation reads the role, its other inline policies and its deny policy;
a revocation checks the role id while it reads the two policies. Run one
after another they cost three round trips; side by side, one. botocore
clients are thread-safe and keep a pool of kept-alive connections per endpoint.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

A = TypeVar("A")
B = TypeVar("B")


def together(first: Callable[[], A], second: Callable[[], B], *checks: Callable[[], object]) -> tuple[A, B]:
    """Both answers, with ``checks`` run alongside; the first failure in argument order is raised."""
    calls: list[Callable[[], object]] = [second, *checks]
    answers: list[object] = [None] * len(calls)
    failures: list[BaseException | None] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            answers[index] = calls[index]()
        except BaseException as exc:  # re-raised below, in this thread
            failures[index] = exc

    threads = [threading.Thread(target=run, args=(i,), name="aws-read", daemon=True) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    try:
        result = first()
    finally:
        for thread in threads:
            thread.join()
    for failure in failures:
        if failure is not None:
            raise failure
    return result, answers[0]  # type: ignore[return-value]
