"""The operators' settings: ``fleet_revoke_wait`` beside a fleet store, ``[daemon] metrics_listen``,
``[egress] secret_refresh``, ``policy_refresh`` and ``evidence_budget``, ``[audit] min_free``.

Both are read once, strictly: a wait a revoke could hang on for minutes, a
wait with no fleet to wait for, or a listener address that is a host name
(resolved who knows where) or has no port is a one-line error naming the key.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.core.inputs.config import (
    DEFAULT_FLEET_REVOKE_WAIT,
    DEFAULT_POLICY_REFRESH,
    DEFAULT_SECRET_REFRESH,
    Config,
    load_config,
)
from broker.vocab.errors import ConfigError

BASE = 'state_dir = "s"\nruntime_dir = "/run/b"\npolicy_dir = "p"\n'
FLEET = BASE + 'store = "postgresql://broker@127.0.0.1/broker"\nstore_passfile = "pgpass"\n'


def load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return load_config(path)


def test_a_fleet_revoke_waits_five_seconds_unless_told_and_zero_means_no_wait(tmp_path: Path) -> None:
    store = load(tmp_path, FLEET).store
    assert store is not None and store.fleet_revoke_wait == DEFAULT_FLEET_REVOKE_WAIT == 5
    for value, seconds in (('"2s"', 2), ("0", 0), ('"1m"', 60)):
        store = load(tmp_path, FLEET + f"fleet_revoke_wait = {value}\n").store
        assert store is not None and store.fleet_revoke_wait == seconds


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (FLEET + 'fleet_revoke_wait = "61s"\n', "fleet_revoke_wait: at most 60s"),
        (FLEET + 'fleet_revoke_wait = "1h"\n', "fleet_revoke_wait: at most 60s"),
        (FLEET + "fleet_revoke_wait = -1\n", "fleet_revoke_wait: must not be negative"),
        (FLEET + 'fleet_revoke_wait = "soon"\n', "fleet_revoke_wait: expected a duration"),
        (BASE + 'fleet_revoke_wait = "5s"\n', 'fleet_revoke_wait: only with store = "postgresql://..."'),
        (BASE + '[daemon]\nmetrics_listen = "localhost:9464"\n', "daemon.metrics_listen: 'localhost:9464' is not"),
        (BASE + '[daemon]\nmetrics_listen = "127.0.0.1"\n', "is not ADDRESS:PORT"),
        (BASE + '[daemon]\nmetrics_listen = "::1:9464"\n', "is not ADDRESS:PORT"),
        (BASE + '[daemon]\nmetrics_listen = "[127.0.0.1]:9464"\n', "is not ADDRESS:PORT"),
        (BASE + '[daemon]\nmetrics_listen = "127.0.0.1:http"\n', "is not ADDRESS:PORT"),
        (BASE + '[daemon]\nmetrics_listen = "127.0.0.1:0"\n', "daemon.metrics_listen: port '0' is not 1-65535"),
        (BASE + '[daemon]\nmetrics_listen = "127.0.0.1:70000"\n', "port '70000' is not 1-65535"),
        (BASE + "[daemon]\nmetrics_listen = 9464\n", "daemon.metrics_listen: expected a string"),
        (BASE + "[egress]\nsecret_refresh = 0\n", "egress.secret_refresh: a duration must be positive"),
        (BASE + '[egress]\nsecret_refresh = "often"\n', "egress.secret_refresh: 'often' is not a duration"),
        (BASE + "[egress]\npolicy_refresh = 0\n", "egress.policy_refresh: a duration must be positive"),
        (BASE + '[egress]\npolicy_refresh = "1 min"\n', "egress.policy_refresh: '1 min' is not a duration"),
    ],
)
def test_bad_operator_settings_fail_with_one_line(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    assert fragment in caught.value.message, caught.value.message
    assert "\n" not in caught.value.message


def test_metrics_listen_takes_an_ip_address_of_either_family(tmp_path: Path) -> None:
    for value, address in (("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:9100", ("::1", 9100))):
        daemon = load(tmp_path, BASE + f'[daemon]\nmetrics_listen = "{value}"\n').daemon
        assert daemon is not None and daemon.metrics_listen == address
    daemon = load(tmp_path, BASE + "[daemon]\n").daemon
    assert daemon is not None and daemon.metrics_listen is None  # no listener unless asked


def test_a_kv_secret_is_checked_for_a_new_version_every_minute_unless_told(tmp_path: Path) -> None:
    assert load(tmp_path, BASE).secret_refresh == DEFAULT_SECRET_REFRESH == 60
    assert load(tmp_path, BASE + '[egress]\nsecret_refresh = "15s"\n').secret_refresh == 15
    assert load(tmp_path, BASE + '[egress]\nsecret_refresh = "5m"\n').secret_refresh == 300


def test_a_running_session_reads_its_policy_again_every_minute_at_the_latest_unless_told(tmp_path: Path) -> None:
    assert load(tmp_path, BASE).policy_refresh == DEFAULT_POLICY_REFRESH == 60
    assert load(tmp_path, BASE + '[egress]\npolicy_refresh = "10s"\n').policy_refresh == 10


def test_the_evidence_budget_and_min_free_have_their_defaults_and_take_sizes(tmp_path: Path) -> None:
    config = load(tmp_path, BASE)
    assert config.min_free == 1 << 30
    budget = config.evidence_budget
    assert (budget.records, budget.bytes, budget.cap, budget.cap_records, budget.cap_bytes) == (
        10_000,
        64 << 20,
        10,
        100_000,
        640 << 20,
    )
    text = '[audit]\nmin_free = "0"\n[egress]\nevidence_budget = {records = 50, bytes = "512KiB"}\n'
    config = load(tmp_path, BASE + text)
    assert config.min_free == 0 and config.evidence_budget.cap_records == 500
    assert config.evidence_budget.bytes == 512 << 10


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[audit]\nmin_free = "1GB"\n', "audit.min_free: '1GB' is not a size"),
        ("[audit]\nmin_free = -1\n", "audit.min_free: a size must not be negative"),
        ("[egress]\nevidence_budget = 10000\n", "egress.evidence_budget: expected a mapping, got an integer"),
        ("[egress]\nevidence_budget = {records = 0}\n", "egress.evidence_budget.records: must be at least 1"),
        ('[egress]\nevidence_budget = {bytes = "100"}\n', "egress.evidence_budget.bytes: must be at least 1KiB"),
        ("[egress]\nevidence_budget = {cap = 0}\n", "egress.evidence_budget.cap: must be at least 1"),
        ("[egress]\nevidence_budget = {per_minute = 5}\n", "egress.evidence_budget.per_minute: unknown key"),
    ],
)
def test_a_bad_budget_or_min_free_is_one_line_naming_the_key(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, BASE + text)
    assert fragment in raised.value.message
