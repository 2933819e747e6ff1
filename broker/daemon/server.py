"""The daemon's lifecycle: its socket (bound here or handed over by systemd), one thread per connection,
a sweep on an interval, and a graceful stop on SIGTERM (no new connection; what is in flight finishes).

The accept loop (``broker.host.serving.listening``, the one every socket of
the broker uses) never waits for a connection to end: each peer uid but root
(and the daemon's own uid) holds at most ``[daemon] max_connections_per_uid``
connections and all of them together ``DAEMON_MAX_CONNECTIONS``; a
connection over either limit is answered 503 and closed at once, and root is
always served. With the head deadline of ``broker.host.serving.wire`` an idle
peer cannot keep the daemon from root, nor from the other users of its socket
for long.

Provider clients live as long as the daemon (one ``Config``): connections stay
open, the GitHub App JWT and installation ids stay cached, and the provider
credentials are read by this process only, so launchers need no access to them.

With ``[gateway] listen`` the daemon also runs the gateway (``broker.daemon.gateway``): its listener starts before
the socket serves, and when the daemon stops, after the last connection in flight, every session it holds is
revoked and the gateway stops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import grp
import logging
import os
import signal
import socket
import stat
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from broker.core.broker import Broker
from broker.core.inputs.config import DAEMON_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_UID, Config
from broker.daemon.fleet import FleetListener
from broker.daemon.gateway import GatewayHolds
from broker.daemon.holds import Link
from broker.daemon.peer import Peer, peer_of
from broker.daemon.routes import Routes
from broker.daemon.watching import MetricsListener, daemon_metrics, measure_budgets
from broker.host.serving.listening import Acceptor, Limits, Refusals
from broker.host.serving.wire import busy, serve_connection
from broker.vocab.errors import BrokerError, ConfigError, DaemonUnreachable
from broker.vocab.logs import event
from broker.vocab.tracing import span
from providers.capabilities import Refreshing

if TYPE_CHECKING:
    from broker.telemetry.traces import Tracing

LOG = logging.getLogger("broker.daemon")
SOCKET_MODE = 0o660
SD_LISTEN_FDS_START = 3


def inherited_socket() -> socket.socket | None:
    """The listening socket systemd passed (``LISTEN_FDS``), if it was passed to this very process."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()) or int(os.environ.get("LISTEN_FDS", "0") or 0) < 1:
        return None
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)
    listener = socket.socket(fileno=SD_LISTEN_FDS_START)
    if listener.family != socket.AF_UNIX or listener.type != socket.SOCK_STREAM:
        raise ConfigError("the socket systemd passed is not a Unix stream socket (see scripts/systemd/broker.socket)")
    os.set_inheritable(listener.fileno(), False)
    return listener


def socket_gid(group: str | None) -> int:
    """``[daemon] socket_group`` as a gid: a group name or number; the daemon's own group when unset."""
    if group is None:
        return os.getegid()
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ConfigError(f"daemon.socket_group: no group named {group[:64]!r}") from None


def bind_socket(path: Path, group: str | None) -> socket.socket:
    """A listening socket at ``path``, mode 0660 and group ``group`` before it listens.

    Its mode comes from the umask at ``bind`` and its group through the
    directory's descriptor without following a link: nothing is chmodded or
    chowned by a path that someone else could have swapped for a link.
    """
    gid = socket_gid(group)
    _clear_stale(path)
    os.makedirs(path.parent, mode=0o755, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    previous = os.umask(0o777 & ~SOCKET_MODE)  # made 0660: no chmod afterwards
    try:
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            listener.bind(str(path))
            os.chown(path.name, -1, gid, dir_fd=directory, follow_symlinks=False)
            if not stat.S_ISSOCK(os.stat(path.name, dir_fd=directory, follow_symlinks=False).st_mode):
                raise ConfigError(f"daemon socket {path} was replaced while it was made; its directory must be root's")
        finally:
            os.close(directory)
    except ConfigError:
        listener.close()
        raise
    except OSError as exc:
        listener.close()
        raise ConfigError(f"daemon socket {path}: {exc.strerror}") from None
    finally:
        os.umask(previous)
    listener.listen(socket.SOMAXCONN)  # a hog's burst must not fill the queue root's connection waits in
    return listener


def _clear_stale(path: Path) -> None:
    """Remove a socket a dead daemon left; refuse when a daemon answers there or something else is there."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise ConfigError(f"daemon socket {path} exists and is not a socket; remove it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        probe.connect(str(path))
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise ConfigError(f"daemon socket {path}: {exc.strerror}") from None
        os.unlink(path)
        return
    finally:
        probe.close()
    raise ConfigError(f"a daemon is already listening on {path}")


class Daemon:
    def __init__(
        self,
        broker: Broker,
        listener: socket.socket,
        sweep_interval: int,
        per_uid: int = DEFAULT_MAX_CONNECTIONS_PER_UID,
        gateway: GatewayHolds | None = None,
    ) -> None:
        self.broker = broker
        self.listener = listener
        self.sweep_interval = sweep_interval
        self.per_uid = per_uid
        self.stopping = threading.Event()
        self.gateway = gateway
        self.routes = Routes(broker, self.stopping, gateway)
        self.fleet: FleetListener | None = None
        self.scrapes: MetricsListener | None = None
        self.acceptor: Acceptor[Peer] = Acceptor(
            listener,
            identify=peer_of,
            key=lambda peer: peer.uid,
            serve=self._serve,
            refuse=lambda connection, why: busy(connection, why, DaemonUnreachable.exit_code),
            limits=Limits(total=DAEMON_MAX_CONNECTIONS, per_peer=per_uid, exempt=_operator),
            stopping=self.stopping,
            refusals=Refusals(
                peer=lambda peer, held: (
                    f"the broker daemon is busy: uid {peer.uid} already holds {held} connections"
                    " ([daemon] max_connections_per_uid)"
                ),
                full=f"the broker daemon is busy: {DAEMON_MAX_CONNECTIONS} connections are open; try again",
                no_thread="the broker daemon cannot start a thread for this connection",
            ),
        )

    def stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        self.stopping.set()

    def run(self) -> None:
        """Serve until ``stop``; then wait for every connection in flight and for the sweep to finish."""
        revokes = self.broker.store.fleet_revokes()
        if revokes is not None:  # before the first sweep: an ask made while this host was down is finished at once
            self.fleet = FleetListener(self.broker, revokes, self._revoke_here, self.stopping).start()
        sweeper = threading.Thread(target=self._sweep_loop, name="sweep")
        sweeper.start()
        event(LOG, "daemon listening", socket=str(self.listener.getsockname()), sweep_interval=self.sweep_interval)
        try:
            self.acceptor.run()  # until stopping; then every connection in flight has ended
        finally:
            if self.gateway is not None:
                self.gateway.close()  # every session it holds revoked
            sweeper.join()
            for part in (self.fleet, self.scrapes):
                if part is not None:
                    part.join()
            event(LOG, "daemon stopped")

    def listen_for_scrapes(self, address: tuple[str, int]) -> None:
        """Serve ``GET /metrics`` on ``address`` too (``[daemon] metrics_listen``), until the daemon stops."""
        assert self.broker.metrics is not None
        self.scrapes = MetricsListener(address, self.broker.metrics, self.stopping).start()

    def _revoke_here(self, broker: Broker, session: str) -> bool:
        """A session of this host another host revoked: what only this host can do, as a local revoke does it."""
        report = self.routes.revoke_one(broker, session)
        broker.checkpoint()
        return report.dir_removed

    def _serve(self, connection: socket.socket, peer: Peer) -> None:
        """One connection, in its own thread (the acceptor closes it and counts it out afterwards)."""
        link = Link(connection)
        try:
            try:
                handle = lambda request, send: self.routes.handle(request, peer, send, link)  # noqa: E731
                serve_connection(connection, handle, self.stopping, self.acceptor.limits.head_deadline)
            finally:
                self.routes.release(peer, link)  # what an exec client held ends with its connection
        except Exception:  # a bug in one connection never stops the daemon
            LOG.exception("daemon connection failed")

    def _sweep_loop(self) -> None:
        """Sweep at start (a crashed predecessor's half-done sessions) and then every ``sweep_interval``;
        each time, keep every provider's own login valid until well after the next turn."""
        while True:
            self.sweep_once()
            for provider in self.broker.config.providers.values():
                if not isinstance(provider, Refreshing):
                    continue
                try:
                    provider.refresh(2 * self.sweep_interval)
                except Exception:  # the seam promises no raise; a bug here must not stop the sweeps
                    LOG.exception("provider refresh failed")
            if self.stopping.wait(self.sweep_interval):
                return

    def sweep_once(self) -> None:
        from broker.core.sweeping import sweep

        broker = dataclasses.replace(self.broker)
        try:
            with span("daemon sweep") as traced:
                report = sweep(broker)
                broker.checkpoint()
                broker.witness()
                traced.set(count=len(report.expired) + len(report.recovered) + len(report.retried))
            if report.expired or report.recovered or report.retried or report.pending or report.asked:
                event(LOG, "swept", **report.to_json())
            measure_budgets(broker)
        except BrokerError as exc:
            event(LOG, "sweep failed", error=exc.message)
        except Exception:
            LOG.exception("sweep failed")


def _operator(uid: int) -> bool:
    """Root, and the daemon's own uid (its operator when it is not root): always served, never counted."""
    return uid in (0, os.geteuid())


def serve(config: Config, socket_path: Path | None = None) -> None:
    """Run the daemon in this process until SIGTERM (or SIGINT/SIGHUP)."""
    settings = config.daemon_settings
    tracing = _start_tracing(config)
    broker = Broker.open(config, teardown=True)  # it revokes and sweeps: even on a nearly full disk it opens
    broker.metrics = daemon_metrics(broker)
    try:
        gateway = GatewayHolds(broker, config.gateway) if config.gateway is not None else None  # refused first
        try:
            listener = inherited_socket()
            bound = socket_path or settings.socket if listener is None else None
            if bound is not None:
                listener = bind_socket(bound, settings.socket_group)
        except BaseException:
            if gateway is not None:
                gateway.close()
            raise
        assert listener is not None
        daemon = Daemon(broker, listener, settings.sweep_interval, settings.max_connections_per_uid, gateway)
        if settings.metrics_listen is not None:
            daemon.listen_for_scrapes(settings.metrics_listen)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, daemon.stop)
        try:
            daemon.run()
        finally:
            if bound is not None:  # clients now get "cannot reach the daemon" at once
                with contextlib.suppress(OSError):
                    os.unlink(bound)
    finally:
        with contextlib.suppress(BrokerError):
            broker.close()
        if tracing is not None:
            tracing.close()


def _start_tracing(config: Config) -> Tracing | None:
    """Tracing for the daemon's life when ``[telemetry] otlp_endpoint`` is set: each request is a trace of its own."""
    if config.telemetry is None:
        return None
    from broker.telemetry.traces import start_tracing

    return start_tracing(config.telemetry, host=config.host)
