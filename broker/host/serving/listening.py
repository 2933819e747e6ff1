"""One accept loop for every socket the broker serves: the daemon's, a session's ``broker.sock``, an exec's control
socket and a gateway's TCP listener: a connection is named, admitted within its limits and served in a thread of
its own (or handed to an event loop), and the loop never waits on a peer.

What differs between them is a parameter (``Limits``): how many connections
are served at once in all and per peer (a key the listener names its peers
by: their uid from ``SO_PEERCRED`` on a Unix socket), which peers are served
uncounted (root and the daemon's own uid), which are refused outright (a
session socket's stranger), how long a peer has to send its request head
(``head_deadline``, for the listener's serving function to apply) and whether
connections are served one after another in the loop's own thread (the
control socket, whose exchanges are one line each way). A connection over a
limit is answered by ``refuse`` at once (503 for HTTP) and closed; a peer that
cannot be named is closed, one ``admit`` turns away is answered (or not) by
``admit`` itself. Running out of descriptors pauses the loop instead of ending
it. A TLS listener wraps each connection in its serving function, in the
connection's thread: the handshake never holds up the loop. A listener whose
connections are served on an event loop (the gateway: one loop for every
session's connections) gives ``hand`` instead of ``serve``: it takes the
connection over, with the call that counts it out once it ends.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import threading
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

LOG = logging.getLogger("broker.host")
P = TypeVar("P")  # what a listener knows of a peer (its credentials)
ACCEPT_POLL = 0.5  # how often the loop looks whether it is to stop
#: Accept errors that pass: out of descriptors or memory (connections finishing free them), a TCP peer gone first.
PASSING = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED)


def _nobody(key: object) -> bool:
    return False


@dataclass(frozen=True)
class Limits:
    """What one listener serves at once: ``total`` connections in all, ``per_peer`` for one peer key (None: no
    such limit); ``exempt`` keys are served and never counted; ``head_deadline`` is how long a connection may
    take to send its request head (its serving function applies it); ``inline``: served in the loop's thread."""

    total: int
    per_peer: int | None = None
    exempt: Callable[[Any], bool] = field(default=_nobody)
    head_deadline: float = 10.0
    inline: bool = False


@dataclass(frozen=True)
class Refusals(Generic[P]):
    """The words of a refusal: a peer at its own limit (with how many it holds), the listener full, no thread."""

    peer: Callable[[P, int], str] = lambda peer, held: "busy: too many connections of yours; try again"
    full: str = "busy: too many connections; try again"
    no_thread: str = "cannot start a thread for this connection"


class Acceptor(Generic[P]):
    """Accepts on ``listener`` until ``stopping``: names each peer (``identify``), lets ``admit`` turn it away (it
    answers as it sees fit and returns False), refuses it when over ``limits`` (``refuse`` with the words of
    ``refusals``), and serves it (``serve``). ``run`` returns once the listener is closed and every connection it
    served has ended."""

    def __init__(
        self,
        listener: socket.socket,
        *,
        identify: Callable[[socket.socket], P],
        key: Callable[[P], Hashable],
        serve: Callable[[socket.socket, P], None],
        refuse: Callable[[socket.socket, str], None],
        limits: Limits,
        stopping: threading.Event,
        admit: Callable[[socket.socket, P], bool] | None = None,
        refusals: Refusals[P] | None = None,
        name: str = "conn",
        hand: Callable[[socket.socket, P, Callable[[], None]], None] | None = None,
    ) -> None:
        self.listener = listener
        self.hand = hand  # takes a connection over (and counts it out when it ends) instead of ``serve``
        self.identify = identify
        self.key = key
        self.serve = serve
        self.refuse = refuse
        self.limits = limits
        self.stopping = stopping
        self.admit = admit
        self.refusals: Refusals[P] = refusals if refusals is not None else Refusals()
        self.name = name
        self._mutex = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._held: Counter[Hashable] = Counter()  # connections per counted peer key

    def start(self, name: str) -> threading.Thread:
        """``run`` in a thread of its own (a daemon thread: it never keeps the process alive)."""
        thread = threading.Thread(target=self.run, name=name, daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """Stop accepting now: the loop wakes at once rather than at its next look at ``stopping``."""
        self.stopping.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)

    def run(self) -> None:
        self.listener.settimeout(ACCEPT_POLL)
        try:
            while not self.stopping.is_set():
                try:
                    connection, _ = self.listener.accept()
                except TimeoutError:
                    continue
                except OSError as exc:
                    if self.stopping.is_set():
                        return
                    if exc.errno in PASSING:
                        self.stopping.wait(ACCEPT_POLL)  # out of descriptors: let connections finish
                        continue
                    raise
                self._start(connection)
        finally:
            self.listener.close()
            self.join()

    def join(self) -> None:
        """Wait for every connection in flight."""
        with self._mutex:
            running = list(self._threads)
        for thread in running:
            thread.join()

    def _start(self, connection: socket.socket) -> None:
        """Serve ``connection`` in a thread of its own (or here, ``inline``), or refuse it at once; never waits."""
        try:
            peer = self.identify(connection)
        except OSError:
            connection.close()
            return
        if self.admit is not None and not self.admit(connection, peer):
            connection.close()
            return
        key = self.key(peer)
        refusal = self._count(peer, key)
        if refusal is not None:
            self.refuse(connection, refusal)
            return
        if self.hand is not None:
            self._hand(self.hand, connection, peer, key)
            return
        if self.limits.inline:
            self._serve(connection, peer, key)
            return
        thread = threading.Thread(target=self._serve, args=(connection, peer, key), name=self.name, daemon=True)
        with self._mutex:
            self._threads.add(thread)
        try:
            thread.start()
        except RuntimeError:  # no thread to be had: this connection goes, the listener stays
            with self._mutex:
                self._threads.discard(thread)
            self._leave(key)
            self.refuse(connection, self.refusals.no_thread)

    def _hand(
        self,
        hand: Callable[[socket.socket, P, Callable[[], None]], None],
        connection: socket.socket,
        peer: P,
        key: Hashable,
    ) -> None:
        """Hand ``connection`` over; it is counted until the taker calls the ``done`` it is given (once)."""
        left = threading.Event()

        def done() -> None:
            if not left.is_set():
                left.set()
                self._leave(key)

        try:
            hand(connection, peer, done)
        except Exception:  # not taken: this connection goes, the listener stays
            LOG.exception("%s: a connection could not be handed over", self.name)
            connection.close()
            done()

    def _count(self, peer: P, key: Hashable) -> str | None:
        """Count a connection of ``key``; the refusal when it is over a limit (an exempt key: never)."""
        if self.limits.exempt(key):
            return None
        with self._mutex:
            held = self._held[key]
            if self.limits.per_peer is not None and held >= self.limits.per_peer:
                return self.refusals.peer(peer, held)
            if self._held.total() >= self.limits.total:
                return self.refusals.full
            self._held[key] += 1
        return None

    def _leave(self, key: Hashable) -> None:
        if self.limits.exempt(key):
            return
        with self._mutex:
            self._held[key] -= 1
            if self._held[key] <= 0:
                del self._held[key]

    def _serve(self, connection: socket.socket, peer: P, key: Hashable) -> None:
        try:
            self.serve(connection, peer)
        except Exception:  # a bug in one connection never stops the listener
            LOG.exception("%s: a connection failed", self.name)
        finally:
            connection.close()
            self._leave(key)  # counted out before it is no longer waited for
            with self._mutex:
                self._threads.discard(threading.current_thread())
