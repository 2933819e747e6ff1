"""How many children a delegating session's sandbox may still ask for: ``delegate_rate`` a minute, ``delegate_total``
in all, and how often its refused requests reach the log.

The 64 live children of ``broker.core.delegation.delegating`` bound what a sandbox
holds at once, not what it spends: a child revoked at once frees its slot,
and every cycle is a real mint (and, for an AWS role revoked by deny
policy, an entry in the role's shared budget until the child's credentials
expire). So each request that costs the broker a decision or a mint is
counted here: every ``POST /v1/sessions`` (whatever its answer), every
``POST /v1/policy/check`` that finds the manifest wider, and every request
refused for the rate itself (a sandbox that keeps asking stays refused
until it waits). A covered policy check is given back: it mints and logs
nothing.

One budget serves a session's whole tree: a child's socket is served to the
same sandbox, so its children count against its parent's budget. It lives
in memory, as long as the session's socket (which is as long as its exec).

It also keeps what bounds the log: a refused wider manifest is logged once a
minute per manifest digest, refusals for the rate or the total once a minute,
and the refusals left out are counted (``refused``) for the socket's last record.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from broker.vocab.errors import RateLimited

#: Seconds over which ``rate`` is counted.
WINDOW = 60.0


@dataclass(frozen=True)
class Ticket:
    """One counted request: given back when it turns out to cost nothing (a covered policy check)."""

    at: float


class ChildBudget:
    """The children session ``session``'s tree may still ask for; thread-safe (the socket serves 8 connections)."""

    def __init__(self, session: str, rate: int, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.session = session
        self.rate = rate
        self.total = total
        self._clock = clock
        self._mutex = threading.Lock()
        self._recent: deque[float] = deque(maxlen=rate)  # the last ``rate`` requests: enough to know the window
        self._spent = 0
        self._logged: dict[str, float] = {}  # a manifest digest -> when its refusal was logged
        self._limit_logged = -math.inf  # when a refusal for the rate or the total was last logged
        self.refused: Counter[str] = Counter()  # refusals by why, as counted: "rate", "total", "wider"
        self.unlogged: Counter[str] = Counter()  # those of them no record names

    def take(self) -> Ticket:
        """Count one request; ``RateLimited`` (counted too, for the rate) when the rate or the total is spent."""
        with self._mutex:
            now = self._clock()
            if self._spent >= self.total:
                self.refused["total"] += 1
                raise RateLimited(
                    f"delegation: session {self.session} has asked for {self._spent} children in its life, its"
                    f" delegate_total of {self.total}; it gets no more",
                    "total",
                )
            if len(self._recent) == self.rate and now - self._recent[0] < WINDOW:
                self._recent.append(now)  # the refusal counts against the rate as well
                wait = max(1, math.ceil(WINDOW - (now - self._recent[0])))
                self.refused["rate"] += 1
                raise RateLimited(
                    f"delegation: session {self.session} may ask for {self.rate} children a minute (delegate_rate)"
                    f" and has; retry in {wait}s",
                    "rate",
                )
            self._recent.append(now)
            self._spent += 1
            return Ticket(now)

    def give_back(self, ticket: Ticket) -> None:
        """Uncount ``ticket``'s request: it cost nothing."""
        with self._mutex:
            self._spent -= 1
            if ticket.at in self._recent:
                self._recent.remove(ticket.at)

    def log_limit(self, refused: RateLimited) -> bool:
        """Whether ``refused`` (from ``take``) gets a record: the first such refusal in a minute does."""
        with self._mutex:
            now = self._clock()
            if now - self._limit_logged >= WINDOW:
                self._limit_logged = now
                return True
            self.unlogged[refused.limit] += 1
            return False

    def log_wider(self, digest: str) -> bool:
        """Whether a refusal of the wider manifest ``digest`` gets a record (not logged in the last minute)."""
        with self._mutex:
            now = self._clock()
            self.refused["wider"] += 1
            for seen in [d for d, at in self._logged.items() if now - at >= WINDOW]:
                del self._logged[seen]  # at most ``rate`` digests a minute get this far
            if digest in self._logged:
                self.unlogged["wider"] += 1
                return False
            self._logged[digest] = now
            return True
