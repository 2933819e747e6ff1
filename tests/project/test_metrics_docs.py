"""docs/metrics.md against what a scrape really has: every family it lists, every one its alert rules use.

An alert on a family the broker does not expose never fires, and says
nothing while it does not; so the documented families are checked against
an exposition with every counter, histogram and deny budget in use and the
gauges of a real SQLite store, read back through Prometheus's own parser.
"""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from broker.core.store.sqlite import SqliteSessionStore
from broker.telemetry.metrics import RoleBudget
from tests.integration.telemetry.test_metrics import fill, watched

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def exposed(tmp_path: Path) -> dict[str, str]:
    """Family name (counters with their ``_total``) -> type, of a scrape where everything is in use."""
    store = SqliteSessionStore(tmp_path / "sessions.db")
    try:
        fill(store)
        metrics = watched(store)
        metrics.issued("vault")
        metrics.revoked("vault")
        metrics.denied("vault")
        metrics.failed("vault", "mint")
        metrics.mint_seconds("vault", 0.1)
        metrics.revoke_seconds("vault", 0.1)
        metrics.egress("allowed")
        metrics.gateway_refused("wrong")
        metrics.gateway_sessions(lambda: 3)
        metrics.deny_budgets("aws", [RoleBudget("aws", "arn:aws:iam::123456789012:role/deploy", 1, 2, 10240)])
        text = metrics.exposition().decode()
    finally:
        store.close()
    return {f.name + ("_total" if f.type == "counter" else ""): f.type for f in text_string_to_metric_families(text)}


def test_the_documented_families_are_the_exposed_ones_with_their_types(tmp_path: Path) -> None:
    rows = re.findall(r"^\| `(broker_\w+)` \| (\w+) \|", DOC.read_text(), re.MULTILINE)
    documented = dict(rows)
    assert len(documented) == len(rows) >= 15
    found = exposed(tmp_path)
    assert set(documented) == set(found)
    assert {name: documented[name] for name in found} == found


def test_every_family_an_example_alert_uses_is_exposed(tmp_path: Path) -> None:
    text = DOC.read_text()
    rules = text[text.index("### Example alert rules") : text.index("## Traces")]
    used = set(re.findall(r"\b(broker_[a-z_]+)\b", rules))
    assert used and used <= set(exposed(tmp_path))
