"""One session on the gateway: its proxy, the connections it serves, and how it is cut.

A ``Seat`` is what a running session holds instead of a ``ProxyThread``
(``broker.egress.proxy.thread``) when a gateway serves it: the same
``refuse`` (an outside revoke: its proxy credential is cut, so a new
connection gets 407, and every open connection of the session, tunnels
included, is closed at once), ``denials`` (what its proxy refused, for the
``egress.denied`` and ``egress.refused`` records) and ``stop`` (the same cut,
then its last ``egress.request`` records written). Everything runs on the
gateway's one event loop; these calls come from other threads and wait for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from broker.egress.exchange.refusals import RefusedRequest
from broker.egress.proxy.listener import EgressProxy

T = TypeVar("T")
#: Runs a coroutine on the gateway's loop from another thread and waits for its result.
OnLoop = Callable[[Coroutine[Any, Any, T]], T]


@dataclass(eq=False)
class Seat:
    """A session the gateway serves (see the module docstring)."""

    session_id: str
    proxy: EgressProxy
    digest: bytes  # the keyed hash of its proxy credential
    expires_at: float  # seconds since the epoch: past it, its credential gets 407
    on_loop: OnLoop[Any]
    unseat: Callable[[Seat], None]  # (on the loop) its credential cut: new connections get 407
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    socket_path: Path | None = None  # no socket of its own: the gateway's listener serves it

    def refuse(self) -> None:
        """Its credential cut, every open connection of it closed; nothing gets through from now on."""
        self.on_loop(self._cut())

    async def _cut(self) -> None:
        self.unseat(self)
        if self.proxy.interceptor is not None:
            self.proxy.interceptor.revoke()
        self.proxy.refusing = True
        tasks = [task for task in self.tasks if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def denials(self) -> dict[str | RefusedRequest, int]:
        async def read() -> dict[str | RefusedRequest, int]:
            merged: dict[str | RefusedRequest, int] = {}
            merged.update(self.proxy.gate.denials.items())
            merged.update(self.proxy.gate.refusals.items())
            return merged

        result: dict[str | RefusedRequest, int] = self.on_loop(read())
        return result

    def stop(self) -> int:
        """Cut it, then write its last evidence records; how many could not be written."""
        self.refuse()
        return self.proxy.evidence.close() if self.proxy.evidence is not None else 0
