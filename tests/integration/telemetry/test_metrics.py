"""Metrics: the families SPEC names, read back through Prometheus's own text parser, labels bounded, gauges from a real store.

The exposition is parsed with ``prometheus_client.parser`` (what a scraper
reads), not searched as text. The store's gauges are read from a real
SQLite store (and a real PostgreSQL one) filled through the store's own
interface; a store that cannot answer makes ``broker_store_up`` 0, never a
failed scrape. Label values are provider names, decisions and role names,
at most a fixed number of each: a flood of names (or of anything shaped
like a session id or a token) lands in ``other``.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from broker.core.store.gauges import StoreGaugeReader
from broker.core.store.interface import ApprovalRecord, SessionRecord, SessionStore
from broker.core.store.sqlite import SqliteSessionStore
from broker.core.store.states import ApprovalState, CredentialState, SessionState
from broker.telemetry.labels import OTHER, Bounded, role_name
from broker.telemetry.metrics import BrokerMetrics, RoleBudget
from broker.telemetry.scrape import StoreCollector
from broker.vocab.time import iso
from tests.fixtures.postgres import Postgres

NOW = datetime(2026, 11, 29, 10, 30, tzinfo=UTC)


def scraped(metrics: BrokerMetrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of the exposition: sample name -> (sorted labels) -> value."""
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def types(metrics: BrokerMetrics) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(metrics.exposition().decode())}


# -- counters and histograms ---------------------------------------------------------------------


def test_what_happened_is_counted_per_provider_and_decision() -> None:
    metrics = BrokerMetrics()
    metrics.issued("vault", 2)
    metrics.issued("aws")
    metrics.revoked("vault")
    metrics.denied("github", 3)
    metrics.failed("aws", "mint")
    metrics.failed("aws", "revoke")
    metrics.mint_seconds("vault", 0.02)
    metrics.mint_seconds("vault", 0.7)
    metrics.revoke_seconds("aws", 3.0)
    metrics.egress("allowed", 10)
    metrics.egress("denied")
    metrics.egress("refused", 2)
    samples = scraped(metrics)
    assert samples["broker_credentials_issued_total"] == {(("provider", "aws"),): 1.0, (("provider", "vault"),): 2.0}
    assert samples["broker_credentials_revoked_total"] == {(("provider", "vault"),): 1.0}
    assert samples["broker_credentials_denied_total"] == {(("provider", "github"),): 3.0}
    assert samples["broker_credentials_failed_total"] == {
        (("operation", "mint"), ("provider", "aws")): 1.0,
        (("operation", "revoke"), ("provider", "aws")): 1.0,
    }
    mint = samples["broker_mint_duration_seconds_bucket"]
    assert mint[(("le", "0.025"), ("provider", "vault"))] == 1.0
    assert mint[(("le", "1.0"), ("provider", "vault"))] == 2.0
    assert samples["broker_mint_duration_seconds_count"] == {(("provider", "vault"),): 2.0}
    assert samples["broker_revoke_duration_seconds_sum"] == {(("provider", "aws"),): 3.0}
    assert samples["broker_egress_requests_total"] == {
        (("decision", "allowed"),): 10.0,
        (("decision", "denied"),): 1.0,
        (("decision", "refused"),): 2.0,
    }
    assert not any(name.endswith("_created") for name in samples)
    kinds = types(metrics)
    assert kinds["broker_credentials_issued"] == "counter"
    assert kinds["broker_mint_duration_seconds"] == "histogram"
    assert not any(name.startswith(("python_", "process_")) for name in kinds)  # a registry of its own


def test_labels_are_bounded_and_the_rest_is_counted_as_other() -> None:
    metrics = BrokerMetrics(provider_cap=4)
    token = "ghs_" + secrets.token_hex(16).upper()
    for n in range(1000):
        metrics.issued(f"provider-{n}")
        metrics.mint_seconds(f"provider-{n}", 0.01)
    metrics.issued(token)  # not a provider name: never a label value
    metrics.issued("other")  # the bucket's own name is not a provider's
    metrics.egress("s-0123456789abcdef")  # not a decision
    metrics.failed("provider-0", "delete")  # not an operation
    samples = scraped(metrics)
    issued = samples["broker_credentials_issued_total"]
    assert sorted(dict(labels)["provider"] for labels in issued) == [
        OTHER,
        "provider-0",
        "provider-1",
        "provider-2",
        "provider-3",
    ]
    assert issued[(("provider", OTHER),)] == 998.0 and sum(issued.values()) == 1002.0
    assert len(samples["broker_mint_duration_seconds_count"]) == 5
    assert samples["broker_egress_requests_total"] == {(("decision", OTHER),): 1.0}
    assert samples["broker_credentials_failed_total"] == {(("operation", OTHER), ("provider", "provider-0")): 1.0}
    assert token not in metrics.exposition().decode()


def test_a_bounded_label_admits_the_first_values_only() -> None:
    label = Bounded(2, pattern=re.compile(r"[a-z]+"))
    assert [label(v) for v in ("a", "b", "c", "a", "B", "other")] == ["a", "b", OTHER, "a", OTHER, OTHER]
    assert label.admitted() == {"a", "b"}
    assert role_name("arn:aws:iam::123456789012:role/ci/deploy") == "deploy" and role_name("deploy") == "deploy"


def test_deny_budgets_are_what_the_last_sweep_measured() -> None:
    metrics = BrokerMetrics(role_cap=2)
    arn = "arn:aws:iam::123456789012:role/{}".format
    metrics.deny_budgets(
        "aws",
        [RoleBudget("aws", arn("deploy"), 4000, 5200, 10240), RoleBudget("aws", arn("ci/read"), 100, 300, 10240)],
    )
    metrics.deny_budgets("aws-eu", [RoleBudget("aws-eu", arn("deploy"), 9000, 9500, 10240)])
    samples = scraped(metrics)
    assert samples["broker_deny_budget_used_characters"] == {
        (("provider", "aws"), ("role", "deploy")): 4000.0,
        (("provider", "aws"), ("role", "read")): 100.0,
        (("provider", "aws-eu"), ("role", "deploy")): 9000.0,
    }
    assert samples["broker_deny_budget_limit_characters"][(("provider", "aws"), ("role", "deploy"))] == 10240.0
    # The next sweep finds one role left, and a third role past the cap: it speaks for "other", fullest first.
    metrics.deny_budgets(
        "aws",
        [
            RoleBudget("aws", arn("deploy"), 4100, 5300, 10240),
            RoleBudget("aws", arn("build"), 9900, 10100, 10240),
            RoleBudget("aws", arn("lint"), 10, 20, 10240),
        ],
    )
    reserved = scraped(metrics)["broker_deny_budget_reserved_characters"]
    assert reserved == {
        (("provider", "aws"), ("role", "deploy")): 5300.0,
        (("provider", "aws"), ("role", OTHER)): 10100.0,
        (("provider", "aws-eu"), ("role", "deploy")): 9500.0,
    }


# -- the store's gauges -------------------------------------------------------------------------


def record(n: int, state: SessionState, host: str = "") -> SessionRecord:
    session_id = f"s-{n:012d}"
    return SessionRecord(
        id=session_id,
        task="fix-1",
        requester="1000",
        state=state,
        created_at=NOW,
        expires_at=NOW + timedelta(hours=1),
        dir=f"/run/broker/{session_id}",
        mount_path=f"/run/broker/{session_id}",
        uid=1000,
        gid=1000,
        mounted=False,
        document=None,
        host=host,
    )


def session(store: SessionStore, n: int, state: SessionState, host: str = "") -> str:
    store.create_session(record(n, state, host))
    return f"s-{n:012d}"


def approval(store: SessionStore, n: int, host: str = "") -> str:
    """A session awaiting approval with its request, as an issue under an ``approval`` rule opens them."""
    awaiting = record(n, SessionState.AWAITING_APPROVAL, host)
    store.create_approval(
        awaiting,
        ApprovalRecord(
            request=awaiting.id,
            task=awaiting.task,
            requester="uid:1000",
            requester_uid=1000,
            state=ApprovalState.PENDING,
            digest="a" * 64,
            summary={"decision": {"allowed": True}},
            approvers=(("uid:1001",),),
            timeout=900,
            created_at=NOW,
            expires_at=NOW + timedelta(minutes=15),
            host=host or "host-a",
        ),
    )
    return awaiting.id


def credential(store: SessionStore, session_id: str, provider: str, state: CredentialState) -> None:
    store.add_credential(session_id, f"c-{provider}", provider, "vault", {})
    store.credential_minted(
        session_id, f"c-{provider}", reference={}, scope={}, expires_at=NOW + timedelta(hours=1), fingerprint="f"
    )
    store.set_credential_state(session_id, f"c-{provider}", state)


def fill(store: SessionStore, host: str = "") -> None:
    """3 live sessions (issuing, active, revoking) and 2 ended; pending revocations: vault 2, aws 1; one approval
    request pending, one denied (neither session live)."""
    states = [SessionState.ISSUING, SessionState.ACTIVE, SessionState.REVOKING, SessionState.REVOKED]
    ids = [session(store, n, state, host) for n, state in enumerate([*states, SessionState.EXPIRED])]
    approval(store, 10, host)
    denied = approval(store, 11, host)
    store.decide_approval(
        denied, was=(ApprovalState.PENDING,), now=ApprovalState.DENIED, at=NOW, session_state=SessionState.DENIED
    )
    credential(store, ids[2], "vault", CredentialState.PENDING)
    credential(store, ids[2], "aws", CredentialState.PENDING)
    credential(store, ids[3], "vault", CredentialState.PENDING)
    credential(store, ids[3], "github", CredentialState.REVOKED)
    credential(store, ids[1], "github", CredentialState.ACTIVE)
    store.add_witness_pending(7, "a" * 64, "{}", iso(NOW - timedelta(minutes=5)), only=False)
    store.add_witness_pending(8, "b" * 64, "{}", iso(NOW - timedelta(minutes=1)), only=False)


def watched(store: SessionStore) -> BrokerMetrics:
    metrics = BrokerMetrics()
    metrics.register(StoreCollector(StoreGaugeReader(store), metrics.providers, clock=lambda: NOW))
    return metrics


def check_store_gauges(samples: dict[str, dict[tuple[tuple[str, str], ...], float]]) -> None:
    assert samples["broker_store_up"] == {(): 1.0}
    assert samples["broker_sessions_live"] == {(): 3.0}
    assert samples["broker_revocations_pending"] == {(("provider", "aws"),): 1.0, (("provider", "vault"),): 2.0}
    assert samples["broker_witness_lag_seconds"] == {(): 300.0}
    assert samples["broker_approvals_pending"] == {(): 1.0}


def test_the_store_gauges_are_counted_in_a_real_sqlite_store(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "sessions.db")
    metrics = watched(store)
    empty = scraped(metrics)
    assert empty["broker_sessions_live"] == {(): 0.0} and empty["broker_witness_lag_seconds"] == {(): 0.0}
    assert empty["broker_approvals_pending"] == {(): 0.0}
    assert "broker_revocations_pending" not in empty
    fill(store)
    check_store_gauges(scraped(metrics))
    store.drop_witness_pending(7)
    assert scraped(metrics)["broker_witness_lag_seconds"] == {(): 60.0}
    store.close()
    down = scraped(metrics)  # a store that cannot answer: the scrape still succeeds
    assert down["broker_store_up"] == {(): 0.0} and "broker_sessions_live" not in down


def test_pending_revocations_of_a_flood_of_providers_stay_bounded(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "sessions.db")
    session_id = session(store, 1, SessionState.REVOKING)
    for n in range(40):  # a shared store another host wrote: more provider names than the cap
        credential(store, session_id, f"p{n:02d}", CredentialState.PENDING)
    samples = scraped(watched(store))["broker_revocations_pending"]
    assert len(samples) == 33 and samples[(("provider", OTHER),)] == 8.0 and sum(samples.values()) == 40.0


def test_the_store_gauges_are_counted_in_a_real_postgresql_store(tmp_path: Path, postgres: Postgres) -> None:
    from broker.core.store.postgres.store import PostgresSessionStore
    from tests.fixtures.fleet import create_fleet_db

    db = create_fleet_db(postgres, tmp_path)
    here = PostgresSessionStore(db.url, host="host-a", passfile=db.passfile)
    other = PostgresSessionStore(db.url, host="host-b", passfile=db.passfile)
    try:
        fill(here, "host-a")
        other.add_witness_pending(1, "c" * 64, "{}", iso(NOW - timedelta(hours=2)), only=False)
        check_store_gauges(scraped(watched(here)))  # the fleet's sessions; this host's witness only
        session(other, 99, SessionState.ACTIVE, "host-b")
        samples = scraped(watched(other))
        assert samples["broker_sessions_live"] == {(): 4.0}
        assert samples["broker_witness_lag_seconds"] == {(): 7200.0}
    finally:
        here.close()
        other.close()
