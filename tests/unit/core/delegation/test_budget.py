"""The children a delegating session's tree may ask for, counted: a sliding minute, a total, and the log's bounds."""

from __future__ import annotations

import pytest

from broker.core.delegation.budget import WINDOW, ChildBudget
from broker.vocab.errors import RateLimited


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_minute_holds_the_rate_and_the_next_one_passes_once_the_oldest_is_a_minute_old() -> None:
    clock = Clock()
    budget = ChildBudget("s-parent000001", 3, 100, clock)
    for _ in range(3):
        budget.take()
        clock.now += 10
    with pytest.raises(RateLimited, match="may ask for 3 children a minute") as refused:
        budget.take()  # at 1030: counted too, so the window now starts at 1010
    assert refused.value.limit == "rate" and refused.value.exit_code == 3
    assert "retry in 40s" in refused.value.message
    clock.now = 1065  # 1010, 1020 and 1030 are still within the minute
    with pytest.raises(RateLimited, match="retry in 15s"):  # and now 1020, 1030, 1065
        budget.take()
    clock.now = 1020 + WINDOW  # as the last answer said
    budget.take()
    assert budget.refused == {"rate": 2}


def test_a_sandbox_that_keeps_asking_stays_refused_until_it_waits() -> None:
    clock = Clock()
    budget = ChildBudget("s-parent000001", 2, 100, clock)
    budget.take()
    budget.take()
    for _ in range(200):  # one refusal every second, for 200 seconds
        clock.now += 1
        with pytest.raises(RateLimited):
            budget.take()
    clock.now += WINDOW
    budget.take()


def test_the_total_is_for_the_sessions_life_and_a_given_back_request_is_not_counted() -> None:
    clock = Clock()
    budget = ChildBudget("s-parent000001", 100, 3, clock)
    ticket = budget.take()
    budget.give_back(ticket)  # a covered policy check: it cost nothing
    for _ in range(3):
        budget.take()
    clock.now += 10 * WINDOW
    with pytest.raises(RateLimited, match="has asked for 3 children in its life, its delegate_total of 3") as refused:
        budget.take()
    assert refused.value.limit == "total"


def test_refusals_for_the_rate_reach_the_log_once_a_minute_and_are_counted() -> None:
    clock = Clock()
    budget = ChildBudget("s-parent000001", 1, 100, clock)
    budget.take()
    logged = []
    for _ in range(30):
        clock.now += 3
        try:
            budget.take()
        except RateLimited as refused:
            logged.append(budget.log_limit(refused))
    assert logged.count(True) == 2  # at 1003 and 1063
    assert budget.refused == {"rate": 30} and budget.unlogged == {"rate": 28}


def test_a_wider_manifest_is_logged_once_a_minute_per_digest() -> None:
    clock = Clock()
    budget = ChildBudget("s-parent000001", 10, 100, clock)
    assert budget.log_wider("a" * 64) and budget.log_wider("b" * 64)
    clock.now += 30
    assert not budget.log_wider("a" * 64)
    clock.now += 31
    assert budget.log_wider("a" * 64)
    assert budget.refused == {"wider": 4} and budget.unlogged == {"wider": 1}
