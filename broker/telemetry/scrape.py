"""The gauges a scrape reads from the session store: live sessions, pending revocations, approvals, witness lag.

They describe what the store holds, so they are computed when Prometheus
asks, not kept in step by every command: ``StoreCollector`` asks the store
once per scrape through the small ``StoreGauges`` protocol (counts from
``COUNT``/``GROUP BY``, never rows loaded), which the session store
implements (``broker.core.store.gauges``). A store that cannot answer (a
fleet's PostgreSQL down) makes ``broker_store_up`` 0 and the store's gauges
absent from that scrape, never a failed scrape.

In a fleet every daemon reads the one shared store: ``broker_sessions_live``
and ``broker_revocations_pending`` are the fleet's (aggregate them across
instances with ``max``, not ``sum``), so a host that is down still has its
pending revocations seen by the others; ``broker_witness_lag_seconds`` is
the reporting host's own witness.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.telemetry.labels import Bounded
from broker.vocab.errors import BrokerError
from broker.vocab.time import utcnow


@dataclass(frozen=True)
class StoreCounts:
    live_sessions: int  # issuing, active or revoking
    pending_revocations: Mapping[str, int]  # credentials left ``pending``, by provider instance
    oldest_witness_pending: datetime | None  # when the oldest checkpoint not yet in the witness was made
    approvals_pending: int | None = None  # None: this store keeps no approval requests


class StoreGauges(Protocol):
    """What a scrape needs from the session store: a few counts, cheap with 10,000 live sessions."""

    @abstractmethod
    def gauge_counts(self) -> StoreCounts:
        """The counts now; a ``StoreError`` when the store cannot be read."""


def _family(name: str, text: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, labels=labels)


class StoreCollector(Collector):
    """The store's gauges, read at each scrape; see the module docstring."""

    def __init__(self, store: StoreGauges, providers: Bounded, clock: Callable[[], datetime] = utcnow) -> None:
        self._store = store
        self._providers = providers
        self._clock = clock

    def describe(self) -> Iterator[Metric]:
        """The families without values, so registering the collector does not query the store."""
        yield from self._families()

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (
            _family("broker_store_up", "Whether the session store answered this scrape (1) or not (0)"),
            _family("broker_sessions_live", "Sessions issuing, active or revoking"),
            _family("broker_revocations_pending", "Credentials whose revocation has not succeeded yet", ["provider"]),
            _family("broker_approvals_pending", "Issue requests waiting for an approver"),
            _family("broker_witness_lag_seconds", "Age of the oldest checkpoint not yet written to the witness"),
        )

    def collect(self) -> Iterator[Metric]:
        up, live, pending, approvals, lag = self._families()
        try:
            counts = self._store.gauge_counts()
        except BrokerError:
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        live.add_metric([], float(counts.live_sessions))
        by_label: dict[str, int] = {}
        for provider, count in counts.pending_revocations.items():
            label = self._providers(provider)
            by_label[label] = by_label.get(label, 0) + count
        for label, count in sorted(by_label.items()):
            pending.add_metric([label], float(count))
        oldest = counts.oldest_witness_pending
        lag.add_metric([], max(0.0, (self._clock() - oldest).total_seconds()) if oldest is not None else 0.0)
        yield from (up, live, pending, lag)
        if counts.approvals_pending is not None:
            approvals.add_metric([], float(counts.approvals_pending))
            yield approvals
