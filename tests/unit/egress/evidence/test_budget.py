"""A session's evidence budget in process: which records are written as they are, which are summed a minute at a
time, when the hard cap is reached, and that every request is counted once."""

from __future__ import annotations

from typing import Any

from broker.egress.evidence.budget import EXHAUSTED, MAX_KEYS, WINDOW, EvidenceBudget, Ledger

T0 = 1_800_000_000.0  # a whole minute of the clock
OVERHEAD = 300


def record(decision: str = "refused", method: str = "POST", host: str = "pypi.test:443", **more: Any) -> dict[str, Any]:
    return {
        "host": host,
        "method": method,
        "path": "/upload",
        "decision": decision,
        "rule": "agents",
        "reason": "POST is not among the methods",
        "status": 403 if decision == "refused" else 200,
        "request_bytes": 10,
        "answer_bytes": 20,
        "head_sha256": "0" * 64,
        **more,
    }


def counted(records: list[dict[str, Any]], written: int) -> int:
    return written + sum(int(r["count"]) for r in records)


def test_within_the_budget_every_request_is_its_own_record_then_refusals_are_summed_per_key_and_minute() -> None:
    ledger = Ledger(EvidenceBudget(records=3, cap=100), OVERHEAD)
    assert [ledger.admit(record(), T0 + n) for n in range(3)] == [True] * 3
    assert ledger.admit(record(decision="allowed", method="GET"), T0 + 4)  # what went upstream: always its own
    refusals = [record(method="POST")] * 5 + [record(method="DELETE")] * 2
    assert not any(ledger.admit(fields, T0 + 10) for fields in refusals)
    assert ledger.due(T0 + WINDOW - 1) == [] and ledger.next_due() == T0 + WINDOW
    summed = ledger.due(T0 + WINDOW)
    assert [(r["method"], r["count"], r["request_bytes"], r["answer_bytes"]) for r in summed] == [
        ("POST", 5, 50, 100),
        ("DELETE", 2, 20, 40),
    ]
    assert {(r["window_start"], r["window_end"]) for r in summed} == {("2027-01-15T08:00:00Z", "2027-01-15T08:01:00Z")}
    assert all(r["head_sha256"] is None and r["path"] == "/upload" for r in summed)
    assert counted(summed, 4) == 4 + len(refusals) and ledger.records == 4 + 2  # each sum is one record


def test_a_new_minute_opens_a_new_sum_and_the_end_writes_what_is_open() -> None:
    ledger = Ledger(EvidenceBudget(records=1, cap=100), OVERHEAD)
    assert ledger.admit(record(), T0)
    assert not ledger.admit(record(), T0 + 30)
    assert not ledger.admit(record(), T0 + WINDOW + 1)  # the first minute's sum is ready, a second one opens
    assert not ledger.admit(record(), T0 + WINDOW + 2)
    assert [r["count"] for r in ledger.due(T0 + WINDOW + 3)] == [1]
    [last] = ledger.rest(T0 + WINDOW + 5)
    assert last["count"] == 2 and last["window_end"] == "2027-01-15T08:01:05Z"
    assert ledger.rest(T0 + WINDOW + 6) == []


def test_keys_past_the_limit_of_a_minute_are_summed_under_star() -> None:
    ledger = Ledger(EvidenceBudget(records=1, cap=1000), OVERHEAD)
    assert ledger.admit(record(), T0)
    methods = [f"M{n}" for n in range(MAX_KEYS + 10)]  # a sandbox varying the method to make new keys
    for method in methods * 2:
        assert not ledger.admit(record(method=method), T0 + 1)
    summed = ledger.due(T0 + WINDOW)
    assert len(summed) == MAX_KEYS + 1
    other = [r for r in summed if r["host"] == "*"]
    assert [(r["method"], r["rule"], r["path"], r["count"]) for r in other] == [("*", "*", "*", 20)]
    assert counted(summed, 0) == 2 * len(methods)


def test_the_bytes_budget_counts_too() -> None:
    ledger = Ledger(EvidenceBudget(records=1000, bytes=4096, cap=100), OVERHEAD)
    admitted = [ledger.admit(record(path="/" + "a" * 1000), T0) for _ in range(5)]
    assert admitted == [True, True, True, False, False] and ledger.bytes >= 4096


def test_past_the_cap_refusals_are_counted_once_at_the_end_and_allowed_ones_still_written() -> None:
    ledger = Ledger(EvidenceBudget(records=2, cap=2), OVERHEAD)  # the cap: 4 records
    assert [ledger.admit(record(decision="allowed"), T0) for _ in range(3)] == [True] * 3
    assert not ledger.exhausted and ledger.exhausted_note() is None
    assert ledger.admit(record(decision="allowed"), T0 + 1)
    assert ledger.exhausted
    note = ledger.exhausted_note()
    assert note == {"records": 4, "bytes": ledger.bytes, "cap_records": 4, "cap_bytes": 2 * (64 << 20), "summed": 0}
    assert ledger.exhausted_note() is None  # once
    assert not any(ledger.admit(record(status=503, reason=EXHAUSTED), T0 + 2) for _ in range(7))
    assert ledger.admit(record(decision="allowed"), T0 + 3)  # a request that was under way: it went upstream
    [past] = ledger.rest(T0 + 9)
    assert (past["host"], past["method"], past["status"], past["count"]) == ("*", "*", 503, 7)
    assert past["reason"] == EXHAUSTED
    assert ledger.records == 5 and ledger.summed == 7
