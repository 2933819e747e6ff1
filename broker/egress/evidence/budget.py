"""A session's evidence budget: how much its ``egress.request`` records may add to the issuance log.

A request the proxy refuses is answered by the proxy itself, on a connection
it keeps, so refusals cost the sandbox nothing upstream; one record each
would let one sandbox fill the log's disk (and a log that cannot take records
stops every session's proxy and every issue). So, per session
(``[egress] evidence_budget``, ``EvidenceBudget``):

- within the budget (10,000 records or 64 MiB, whichever comes first) every
  request is one record;
- past it, the refusals with the same decision, host, method and rule within
  one minute of the clock are one record with their ``count`` and the minute
  (``window_start``, ``window_end``); its other fields are the first
  refusal's, its byte counts the sum, its hashes none (they were many).
  ``MAX_KEYS`` such records a minute at most: any further refusal of that
  minute counts under host, method and rule ``*``. An allowed request keeps
  its own record: what went upstream with the session's access is never
  summed up;
- past the hard cap (``cap`` times the budget: 100,000 records or 640 MiB;
  the refusals being summed, it is what bounds allowed requests: an 8-hour
  session may make 3.5 a second), ``exhausted`` is true: the proxy refuses every request to a terminated host
  with 503 (fail closed) and one ``egress.evidence_exhausted`` record says so
  (``exhausted_note``, once). Those refusals are counted and written as one
  record when the session ends; a request that was under way gets its own
  record whatever the count, since it may have gone upstream.

Every record written counts, the summed ones too (charged when they open), so
a session adds at most the cap, plus the requests under way when it was
reached, plus those two records. Sizes are the canonical JSON of the record's
fields plus the common fields' (``overhead``). The ``Ledger`` only counts and
decides; the evidence writer holds it under its lock and writes what it says.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from broker.audit.log import canonical
from broker.vocab.fields import Fields
from broker.vocab.time import iso

WINDOW = 60  # seconds: refusals past the budget are summed per minute of the clock
MAX_KEYS = 64  # distinct (decision, host, method, rule) summed a minute; the rest under "*"
OTHER = "*"
EVERY = ("host", "method", "path", "rule")  # what a sum of other refusals names as *
EXHAUSTED = "this session's evidence cap is reached ([egress] evidence_budget), so nothing is forwarded"
SUMMED_EXTRA = 96  # what count, window_start and window_end add to a summed record

Key = tuple[Any, Any, Any, Any]
SIZE = "size (KiB, MiB, GiB, TiB; or bytes)"
#: ``evidence_budget``'s keys as docs/reference.md documents them (key, type, required, meaning, default); its test
#: checks them against the keys ``read_evidence_budget`` reads.
MANUAL_KEYS = (
    ("records", "integer", False, "egress.request records a session writes one per request.", "10000"),
    ("bytes", SIZE, False, "The same budget in bytes of log: whichever is reached first.", "64MiB"),
    (
        "cap",
        "integer 1-100",
        False,
        "The hard cap, as a multiple of records and bytes: past it the session's proxy answers every request to a"
        " terminated host with 503 and logs egress.evidence_exhausted once.",
        "10",
    ),
)
MANUAL_INTRO = (
    "Past the budget, the refusals with the same decision, host, method and rule within a minute of the clock are"
    " one egress.request record with their count, window_start and window_end (64 such a minute, then host, method"
    " and rule *); an allowed request keeps its own record. The refusals past the cap are one record counting them"
    " when the session ends. A key left out keeps its default."
)


@dataclass(frozen=True)
class EvidenceBudget:
    """``[egress] evidence_budget = {records = 10000, bytes = "64MiB", cap = 10}``: per session."""

    records: int = 10_000
    bytes: int = 64 << 20
    cap: int = 10  # the hard cap, as a multiple of both

    @property
    def cap_records(self) -> int:
        return self.records * self.cap

    @property
    def cap_bytes(self) -> int:
        return self.bytes * self.cap


def read_evidence_budget(table: Fields | None) -> EvidenceBudget:
    """``[egress] evidence_budget = {records = 10000, bytes = "64MiB", cap = 10}``; a key left out keeps its
    default."""
    default = EvidenceBudget()
    if table is None:
        return default
    records = table.integer("records", minimum=1, maximum=100_000_000) or default.records
    size = table.size("bytes")
    cap = table.integer("cap", minimum=1, maximum=100) or default.cap
    table.done()
    if size is not None and size < 1 << 10:
        raise table.fail("bytes", "must be at least 1KiB")
    return EvidenceBudget(records, default.bytes if size is None else size, cap)


@dataclass
class _Sum:
    """The refusals of one key in one minute: the first one's fields, how many, their bytes."""

    fields: dict[str, Any]
    start: int
    count: int = 0
    request_bytes: int = 0
    answer_bytes: int = 0

    def add(self, fields: dict[str, Any]) -> None:
        self.count += 1
        self.request_bytes += int(fields.get("request_bytes") or 0)
        self.answer_bytes += int(fields.get("answer_bytes") or 0)

    def record(self, end: float | None = None) -> dict[str, Any]:
        return {
            **self.fields,
            "request_bytes": self.request_bytes,
            "answer_bytes": self.answer_bytes,
            "head_sha256": None,
            "body_sha256": None,
            "body_complete": None,
            "count": self.count,
            "window_start": _iso(self.start),
            "window_end": _iso(self.start + WINDOW if end is None else end),
        }


class Ledger:
    """What one session's records have cost so far, and what the next one becomes (see the module docstring)."""

    def __init__(self, budget: EvidenceBudget, overhead: int) -> None:
        self.budget = budget
        self.overhead = overhead
        self.records = 0
        self.bytes = 0
        self.summed = 0  # refusals counted in a summed record instead of one of their own
        self.opened = 0  # sums opened so far (the writer wakes to time a new one's minute)
        self.exhausted_at: float | None = None
        self._noted = False
        self._open: dict[Key, _Sum] = {}  # the sums of the current minutes
        self._ready: list[dict[str, Any]] = []  # sums whose minute ended, to be written
        self._past_cap: _Sum | None = None

    @property
    def exhausted(self) -> bool:
        return self.exhausted_at is not None

    def within_budget(self) -> bool:
        return self.records < self.budget.records and self.bytes < self.budget.bytes

    def admit(self, fields: dict[str, Any], now: float) -> bool:
        """Whether ``fields`` is written as its own record (charged); False: it was counted in a sum."""
        refused = fields.get("decision") == "refused"
        if refused and self.exhausted:
            if self._past_cap is None:
                assert self.exhausted_at is not None
                every = {"host": OTHER, "method": OTHER, "path": OTHER, "rule": None, "operations": None}
                answer = {"reason": EXHAUSTED, "status": 503, "upstream_status": None, "credential": None}
                self._past_cap = _Sum({**fields, **every, **answer, "failure": None}, int(self.exhausted_at))
            self._past_cap.add(fields)
            self.summed += 1
            return False
        if refused and not self.within_budget():
            self._sum(fields, now)
            self.summed += 1
            return False
        self._charge(len(canonical(fields)) + self.overhead, now)
        return True

    def exhausted_note(self) -> dict[str, Any] | None:
        """The fields of the one ``egress.evidence_exhausted`` record, the first time it is asked once the cap is
        reached; None otherwise."""
        if not self.exhausted or self._noted:
            return None
        self._noted = True
        return {
            "records": self.records,
            "bytes": self.bytes,
            "cap_records": self.budget.cap_records,
            "cap_bytes": self.budget.cap_bytes,
            "summed": self.summed,
        }

    def next_due(self) -> float | None:
        """When the earliest open minute ends (the writer wakes then to write its sum)."""
        if self._ready:
            return 0.0
        return min((s.start + WINDOW for s in self._open.values()), default=None)

    def due(self, now: float) -> list[dict[str, Any]]:
        """The sums whose minute has ended, as record fields."""
        for key in [k for k, s in self._open.items() if s.start + WINDOW <= now]:
            self._ready.append(self._open.pop(key).record())
        ready, self._ready = self._ready, []
        return ready

    def rest(self, now: float) -> list[dict[str, Any]]:
        """Everything still counted when the session ends: the open sums (their minute cut at ``now``) and the
        refusals past the cap."""
        left = self.due(now) + [s.record(min(now, s.start + WINDOW)) for s in self._open.values()]
        self._open.clear()
        if self._past_cap is not None:
            left.append(self._past_cap.record(now))
            self._past_cap = None
        return left

    def _sum(self, fields: dict[str, Any], now: float) -> None:
        minute = int(now // WINDOW * WINDOW)
        key = self._key(fields, minute)
        current = self._open.get(key)
        if current is not None and current.start != minute:  # its minute ended: written, and a new one opens
            self._ready.append(self._open.pop(key).record())
            current = None
        if current is None:
            first = fields if key[1] != OTHER else {**fields, **dict.fromkeys(EVERY, OTHER)}
            current = self._open[key] = _Sum(first, minute)
            self.opened += 1
            self._charge(len(canonical(first)) + self.overhead + SUMMED_EXTRA, now)
        current.add(fields)

    def _key(self, fields: dict[str, Any], minute: int) -> Key:
        """The refusal's key; ``*`` for host, method and rule once ``MAX_KEYS`` other keys have a sum this minute."""
        key: Key = (fields.get("decision"), fields.get("host"), fields.get("method"), fields.get("rule"))
        current = self._open.get(key)
        if current is not None and current.start == minute:
            return key
        if sum(1 for s in self._open.values() if s.start == minute) >= MAX_KEYS:
            return (key[0], OTHER, OTHER, OTHER)
        return key

    def _charge(self, size: int, now: float) -> None:
        self.records += 1
        self.bytes += size
        if self.exhausted_at is None and (
            self.records >= self.budget.cap_records or self.bytes >= self.budget.cap_bytes
        ):
            self.exhausted_at = now


def _iso(seconds: float) -> str:
    return iso(datetime.fromtimestamp(seconds, UTC))
