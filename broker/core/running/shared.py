"""What the sessions a gateway holds share instead of a thread each: the listener, the timers, the evidence pump, the
control socket, and who ends them.

``broker exec`` runs one session per process, and each part of its running
session has a thread of its own (the proxy's loop, the standing, the
renewals, the refreshes, the evidence writer, the control socket). A gateway
holds a thousand: ``SharedParts`` is what their ``RunningSession``s
(``broker.core.running.session``, with ``RunPlan.shared``) are built on
instead. Each session's proxy is a seat on the one ``Gateway`` (its event
loop serves every session's connections), its timed parts run on one
``SharedTimers``, its ``egress.request`` records go through one
``EvidencePump``, and an outside ``broker revoke``, ``session allow`` or
``broker renew`` reaches it through one control socket
(``SessionControls``: ``state_dir/control/gateway.sock``). ``end`` is the
holder's (the daemon's: ``broker.daemon.gateway``): a session halted from
outside, or at its end, is handed to it on a timer's worker (``end_soon``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from broker.core.running.timers import SharedTimers
from broker.egress.evidence.pump import EvidencePump
from broker.egress.gateway.listener import Gateway
from broker.host.control import Controls, SharedControlSocket

if TYPE_CHECKING:
    from broker.core.running.session import RunningSession


class SessionControls:
    """The control socket of every session the gateway holds: each session's controls, by its id."""

    def __init__(self, state_dir: Path) -> None:
        self._held: dict[str, Controls] = {}
        self._mutex = threading.Lock()
        self._socket = SharedControlSocket(state_dir, self.get)

    def get(self, session_id: str) -> Controls | None:
        with self._mutex:
            return self._held.get(session_id)

    @contextlib.contextmanager
    def held(self, session_id: str, controls: Controls) -> Iterator[None]:
        """``session_id`` answers through the shared socket for the length of the block."""
        with self._mutex:
            self._held[session_id] = controls
        try:
            yield
        finally:
            with self._mutex:
                self._held.pop(session_id, None)

    def close(self) -> None:
        self._socket.close()


@dataclass
class SharedParts:
    """The parts a gateway's sessions share (see the module docstring)."""

    gateway: Gateway
    timers: SharedTimers
    pump: EvidencePump
    controls: SessionControls
    end: Callable[[RunningSession, str], object]  # the holder ends a session (its reason: revoke, expired)

    def end_soon(self, session: RunningSession, reason: str) -> None:
        """End ``session`` on a timer's worker: the caller (a control socket's thread, a timer) does not wait."""

        def step() -> None:
            self.end(session, reason)

        self.timers.start(f"end {reason}", step, 0.0)

    def close(self) -> None:
        """Stop what they share, once every session has ended."""
        self.controls.close()
        self.timers.close()
        self.pump.close()
        self.gateway.close()
