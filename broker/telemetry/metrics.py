"""The broker's Prometheus metrics: counters and histograms the core's steps record, on a registry of their own.

``BrokerMetrics`` holds the families SPEC names (see docs/metrics.md) on a
private ``CollectorRegistry``: nothing of the process (no Python GC or
process collectors of the global registry) and nothing another library
registers. What happens is counted where it happens (``issued``,
``revoked``, ``denied``, ``failed``, ``mint_seconds``, ``revoke_seconds``,
``egress``); what the store holds (live sessions, pending revocations,
approvals, the witness's lag) is read at scrape time by
``broker.telemetry.scrape``; each AWS role's deny budget is what the last
sweep measured (``deny_budgets``), since measuring it reads IAM.

Labels are provider instance names, decisions, AWS role names and the
operation (``mint``/``revoke``) only, each ``broker.telemetry.labels.Bounded``:
never a session id, a task or a requester, and never more than a fixed
number of series. ``exposition()`` is the text format a ``/metrics``
answer carries (``CONTENT_TYPE``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.telemetry.labels import PROVIDER_NAME, ROLE_NAME, Bounded, role_name

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
PROVIDER_CAP: Final = 32
ROLE_CAP: Final = 64
EGRESS_DECISIONS: Final = ("allowed", "denied", "refused")
#: Why the gateway answered 407: no readable credential, a wrong one (or one of a session it never held), one of a
#: session that ended (expired, revoked).
GATEWAY_REFUSALS: Final = ("missing", "wrong", "ended")
OPERATIONS: Final = ("mint", "revoke")
#: Provider calls: a warm Vault mint takes milliseconds, an AWS deny-policy revoke seconds, a stuck one 30 s.
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class RoleBudget:
    """One AWS role's deny budget as a sweep measured it: characters of inline policy used, reserved, allowed."""

    provider: str
    role: str  # the role's ARN or name; the label is its name
    used: int
    reserved: int
    limit: int


class _Budgets(Collector):
    """The deny budgets the last sweep measured, replaced whole each time (a role with no live session leaves)."""

    def __init__(self, providers: Bounded, roles: Bounded) -> None:
        self._providers = providers
        self._roles = roles
        self._budgets: dict[tuple[str, str], RoleBudget] = {}
        self._lock = threading.Lock()

    def replace(self, provider: str, budgets: Iterable[RoleBudget]) -> None:
        label = self._providers(provider)
        with self._lock:
            kept = {key: value for key, value in self._budgets.items() if key[0] != label}
            for budget in budgets:
                role = self._roles(role_name(budget.role))
                before = kept.get((label, role))
                kept[(label, role)] = budget if before is None else _fuller(before, budget)
            self._budgets = kept

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            budgets = dict(self._budgets)
        families = {
            "used": "Characters of the role's inline policies in use (AWS revoke_mode deny-policy)",
            "reserved": "Characters they would take with every live session of the role revoked",
            "limit": "Characters IAM allows the role's inline policies in all",
        }
        for part, text in families.items():
            family = GaugeMetricFamily(f"broker_deny_budget_{part}_characters", text, labels=["provider", "role"])
            for (provider, role), budget in sorted(budgets.items()):
                family.add_metric([provider, role], float(getattr(budget, part)))
            yield family


def _fuller(one: RoleBudget, other: RoleBudget) -> RoleBudget:
    """Two roles folded into one label (``other``): the fuller one speaks for both."""
    return one if one.reserved / max(one.limit, 1) >= other.reserved / max(other.limit, 1) else other


class BrokerMetrics:
    """The families of one broker process; see the module docstring."""

    def __init__(self, *, provider_cap: int = PROVIDER_CAP, role_cap: int = ROLE_CAP) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no ``_created`` series beside each counter: half the output, no alert uses them
        self.registry = CollectorRegistry(auto_describe=True)
        self.providers = Bounded(provider_cap, pattern=PROVIDER_NAME)
        self.roles = Bounded(role_cap, pattern=ROLE_NAME)
        self._decisions = Bounded(0, allowed=EGRESS_DECISIONS)
        self._operations = Bounded(0, allowed=OPERATIONS)
        registry = self.registry
        per_provider = ["provider"]
        self._issued = Counter(
            "broker_credentials_issued", "Credentials minted and handed out", per_provider, registry=registry
        )
        self._revoked = Counter(
            "broker_credentials_revoked", "Credentials revoked at their provider", per_provider, registry=registry
        )
        self._denied = Counter(
            "broker_credentials_denied", "Credentials the policy refused to issue", per_provider, registry=registry
        )
        self._failed = Counter(
            "broker_credentials_failed",
            "Provider calls that failed (operation: mint, or revoke left pending)",
            ["provider", "operation"],
            registry=registry,
        )
        self._mint = Histogram(
            "broker_mint_duration_seconds", "Time of one provider mint call", per_provider,
            buckets=LATENCY_BUCKETS, registry=registry,
        )  # fmt: skip
        self._revoke = Histogram(
            "broker_revoke_duration_seconds", "Time of one provider revoke call", per_provider,
            buckets=LATENCY_BUCKETS, registry=registry,
        )  # fmt: skip
        self._egress = Counter(
            "broker_egress_requests",
            "Requests through the egress proxy by decision (allowed, denied, refused)",
            ["decision"],
            registry=registry,
        )
        self._gateway_refused = Counter(
            "broker_gateway_unauthorized",
            "Requests the gateway answered 407 by reason (missing, wrong, ended)",
            ["reason"],
            registry=registry,
        )
        self._gateway_reasons = Bounded(0, allowed=GATEWAY_REFUSALS)
        self._budgets = _Budgets(self.providers, self.roles)
        registry.register(self._budgets)

    # -- what happened --------------------------------------------------------------------

    def issued(self, provider: str, count: int = 1) -> None:
        self._issued.labels(self.providers(provider)).inc(count)

    def revoked(self, provider: str, count: int = 1) -> None:
        self._revoked.labels(self.providers(provider)).inc(count)

    def denied(self, provider: str, count: int = 1) -> None:
        self._denied.labels(self.providers(provider)).inc(count)

    def failed(self, provider: str, operation: str) -> None:
        self._failed.labels(self.providers(provider), self._operations(operation)).inc()

    def mint_seconds(self, provider: str, seconds: float) -> None:
        self._mint.labels(self.providers(provider)).observe(seconds)

    def revoke_seconds(self, provider: str, seconds: float) -> None:
        self._revoke.labels(self.providers(provider)).observe(seconds)

    def egress(self, decision: str, count: int = 1) -> None:
        self._egress.labels(self._decisions(decision)).inc(count)

    def gateway_refused(self, reason: str) -> None:
        """A proxy credential the gateway refused (407), by why: ``GATEWAY_REFUSALS``."""
        self._gateway_refused.labels(self._gateway_reasons(reason)).inc()

    def gateway_sessions(self, count: Callable[[], int]) -> None:
        """The sessions the gateway holds, read at each scrape."""
        gauge = Gauge("broker_gateway_sessions", "Sessions the gateway holds", registry=self.registry)
        gauge.set_function(count)

    def deny_budgets(self, provider: str, budgets: Iterable[RoleBudget]) -> None:
        """The provider's role budgets as a sweep just measured them (roles not named are dropped)."""
        self._budgets.replace(provider, budgets)

    # -- the answer to a scrape ---------------------------------------------------------------

    def register(self, collector: Collector) -> None:
        """Add a collector read at each scrape (``broker.telemetry.scrape.StoreCollector``)."""
        self.registry.register(collector)

    def exposition(self) -> bytes:
        """Every family in the Prometheus text format (``CONTENT_TYPE``)."""
        return generate_latest(self.registry)
