"""The daemon of a fleet host listens for revokes of its sessions on other hosts, and finishes them at once.

A revoke on another host of a session this host holds leaves what only
this host can do: the GitHub token its keep-safe has, the session's tmpfs,
an ``exec`` running it (held by this daemon, or a direct one, reached
through its control socket). The revoking host asks through the store and
announces the ask with NOTIFY (``broker.core.holders``); ``FleetListener``
keeps a PostgreSQL connection of its own listening (psycopg's notifies),
revokes each announced session of this host as a local ``broker revoke``
would, and marks the ask finished in the store, which the asking host is
waiting to read. It finishes the asks made while it was not listening when
it starts and after each reconnection; a lost connection is opened again
after a pause, and the daemon goes on serving meanwhile. Announcements of
other hosts' sessions are read and left alone; a payload is only ever a
session id, checked like any input. An announcement only wakes the
listener: it acts on an ask recorded in the store for this host, since any
role that may connect to the database (an auditor's read-only one) can
send a NOTIFY.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from broker.core import holders
from broker.core.broker import Broker
from broker.core.store.interface import FleetRevokes, RevokeListener
from broker.vocab.errors import BrokerError
from broker.vocab.logs import event
from broker.vocab.tracing import span

LOG = logging.getLogger("broker.daemon")
WAKE = 0.5  # how often a quiet listener looks whether the daemon is stopping
RECONNECT = (0.5, 1.0, 2.0, 5.0)  # pauses before opening the listening connection again
WORKERS = 8


class FleetListener:
    """Hears the asks to revoke this host's sessions and finishes them with ``revoke(broker, session)``."""

    def __init__(
        self,
        broker: Broker,
        revokes: FleetRevokes,
        revoke: Callable[[Broker, str], bool],
        stopping: threading.Event,
    ) -> None:
        self.broker = broker
        self.revokes = revokes
        self.revoke = revoke
        self.stopping = stopping
        self.listening = threading.Event()  # set while the connection listens (tests and the bench wait for it)
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="fleet-revoke")
        self._busy: set[str] = set()
        self._again: set[str] = set()
        self._mutex = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="fleet-listen", daemon=True)

    def start(self) -> FleetListener:
        self._thread.start()
        return self

    def join(self) -> None:
        self._thread.join()
        self._pool.shutdown(wait=True)

    def _run(self) -> None:
        failures = 0
        while not self.stopping.is_set():
            try:
                listener = self.revokes.listen()
            except BrokerError as exc:
                self._pause(failures, exc.message)
                failures += 1
                continue
            try:
                self.listening.set()
                failures = 0
                for session in self.revokes.waiting():  # asked while nobody listened
                    self._submit(session)
                self._hear(listener)
            except BrokerError as exc:
                self._pause(failures, exc.message)
                failures += 1
            finally:
                self.listening.clear()
                listener.close()

    def _hear(self, listener: RevokeListener) -> None:
        while not self.stopping.is_set():
            for session in listener.heard(WAKE):
                self._submit(session)

    def _pause(self, failures: int, why: str) -> None:
        event(LOG, "not listening for fleet revokes", error=why)
        self.stopping.wait(RECONNECT[min(failures, len(RECONNECT) - 1)])

    def _submit(self, session: str) -> None:
        with self._mutex:
            if session in self._busy:
                self._again.add(session)  # asked again while being finished: once more after, to answer this ask
                return
            self._busy.add(session)
        try:
            self._pool.submit(self._finish, session)
        except RuntimeError:  # the daemon is stopping: its next start finishes the ask
            with self._mutex:
                self._busy.discard(session)

    def _finish(self, session: str) -> None:
        broker = dataclasses.replace(self.broker)
        try:
            if session not in self.revokes.waiting():
                return  # announced, never asked of this host: NOTIFY needs no privilege, an ask needs a row
            record = broker.store.get_session(session)
            if record is None or record.host != broker.config.host:
                return  # another host's session (or none): that host's daemon hears it too
            with span("daemon fleet revoke", session=session, host=broker.config.host):
                dir_removed = self.revoke(broker, session)
                self.revokes.finished(session, dir_removed=dir_removed or holders.directory_gone(broker, session))
            event(LOG, "fleet revoke finished", session=session)
        except BrokerError as exc:
            event(LOG, "fleet revoke failed", session=session, error=exc.message)
        except Exception:  # a bug in one revocation never stops the listener
            LOG.exception("fleet revoke failed")
        finally:
            with self._mutex:
                self._busy.discard(session)
                again = session in self._again
                self._again.discard(session)
            if again:
                self._submit(session)
