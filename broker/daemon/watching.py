"""What operators watch the daemon with: its metrics, and ``[daemon] metrics_listen``, a listener for them alone.

``daemon_metrics`` builds the daemon's ``BrokerMetrics`` with the session
store's gauges read at each scrape; the counters travel with the daemon's
``Broker`` (``Broker.metrics``) into every step it takes. ``measure_budgets``
puts each AWS role's deny budget, as a sweep just read it from IAM, into
the metrics (a scrape reads no IAM).

``MetricsListener`` is a plain HTTP listener on an IP address and port
that answers ``GET /metrics`` and nothing else (404, 405), through the same
h11 connection code as the socket (its head deadline and size limits). It
has no peer identity to check: whoever reaches the address reads the
metrics, which carry no secret and no session id (docs/metrics.md), so an
operator binds it to loopback or a scrape network. At most ``SCRAPERS``
connections are served at once; more are answered 503 at once.
"""

from __future__ import annotations

import logging
import socket
import threading

from broker.core.broker import Broker
from broker.core.status import live_deny_budgets
from broker.core.store.gauges import StoreGaugeReader
from broker.host.serving.listening import Acceptor, Limits, Refusals
from broker.host.serving.wire import Raw, Request, Send, busy, error_body, serve_connection
from broker.telemetry.metrics import CONTENT_TYPE, BrokerMetrics, RoleBudget
from broker.telemetry.scrape import StoreCollector
from broker.vocab.errors import BrokerError, ConfigError, DaemonUnreachable
from broker.vocab.logs import event

LOG = logging.getLogger("broker.daemon")
SCRAPERS = 4


def daemon_metrics(broker: Broker) -> BrokerMetrics:
    """The daemon's metrics: every family, with the store's gauges read at each scrape."""
    metrics = BrokerMetrics()
    metrics.register(StoreCollector(StoreGaugeReader(broker.store), metrics.providers))
    return metrics


def measure_budgets(broker: Broker) -> None:
    """Each AWS role's deny budget as IAM has it now, for the metrics (after a sweep; never raises a provider's)."""
    metrics = broker.metrics
    if metrics is None:
        return
    budgets = live_deny_budgets(broker.store, broker.config.providers, broker.clock())
    for name in broker.config.providers:
        metrics.deny_budgets(
            name,
            [
                RoleBudget(name, budget.role, budget.used, budget.reserved, budget.limit)
                for budget in budgets.get(name, [])
                if budget.used is not None and budget.reserved is not None  # unread: the last value goes too
            ],
        )


class MetricsListener:
    """``GET /metrics`` on ``address`` (``[daemon] metrics_listen``) until ``stopping`` is set."""

    def __init__(self, address: tuple[str, int], metrics: BrokerMetrics, stopping: threading.Event) -> None:
        self.metrics = metrics
        self.stopping = stopping
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind(address)
            self.listener.listen(16)
        except OSError as exc:
            self.listener.close()
            where = f"{address[0]}:{address[1]}"
            raise ConfigError(f"daemon.metrics_listen: cannot listen on {where} ({exc.strerror})") from None
        self.address = self.listener.getsockname()[:2]
        self.acceptor: Acceptor[None] = Acceptor(  # the daemon's accept loop; a scraper has no identity to count
            self.listener,
            identify=lambda connection: None,
            key=lambda peer: "scraper",
            serve=self._serve,
            refuse=lambda connection, why: busy(connection, why, DaemonUnreachable.exit_code),
            limits=Limits(total=SCRAPERS),
            stopping=stopping,
            refusals=Refusals(full="too many scrapes at once; try again"),
            name="metrics",
        )
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsListener:
        self._thread = self.acceptor.start("metrics-listen")
        event(LOG, "metrics listening", address=f"{self.address[0]}:{self.address[1]}")
        return self

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _serve(self, connection: socket.socket, peer: None) -> None:
        try:
            serve_connection(connection, self._answer, self.stopping, self.acceptor.limits.head_deadline)
        except Exception:  # one scrape's failure never stops the listener
            LOG.exception("metrics connection failed")

    def _answer(self, request: Request, send: Send) -> None:
        path = request.target.split("?", 1)[0]
        if path != "/metrics":
            send(404, error_body("only /metrics is served here", 2))
        elif request.method != "GET":
            send(405, error_body("only GET /metrics is served here", 2))
        else:
            try:
                body = self.metrics.exposition()
            except BrokerError as exc:  # the collectors catch the store's errors; anything else is one line
                send(500, error_body(exc.message, exc.exit_code))
                return
            send(200, Raw(body, CONTENT_TYPE))
