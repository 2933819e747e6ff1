"""Human and machine output: tables with time left, JSON logs, no colour off a terminal, no secrets in logs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from broker.cli.render import time_left
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.openbao import VAULT_TASK

pytestmark = pytest.mark.server


def test_time_left_reads_naturally() -> None:
    now = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    assert time_left(now + timedelta(seconds=42), now) == "in 42s"
    assert time_left(now + timedelta(minutes=14, seconds=59), now) == "in 14m"
    assert time_left(now + timedelta(hours=1, minutes=5), now) == "in 1h05m"
    assert time_left(now - timedelta(minutes=3), now) == "3m ago"


def test_status_table_shows_time_left_without_colour_codes(vault_env: BrokerEnv) -> None:
    document = vault_env.run("issue", "--task", str(vault_env.write_task(VAULT_TASK)), "--json").json()
    result = vault_env.run("status")
    assert result.code == 0
    header, row = result.stdout.splitlines()[:2]
    assert header.split() == ["SESSION", "TASK", "STATE", "EXPIRES", "CREDENTIALS"]
    assert row.split()[:3] == [document["session"], "fix-build-7", "active"]
    assert row.split()[3:5] in (["in", "19m"], ["in", "20m"])  # a 20-minute session
    assert "kv (vault, active)" in row
    assert "\x1b[" not in result.stdout


def test_verbose_logs_the_decision_and_provider_calls_but_no_secret(vault_env: BrokerEnv) -> None:
    result = vault_env.run("--verbose", "issue", "--task", str(vault_env.write_task(VAULT_TASK)), "--json")
    assert result.code == 0
    token = (Path(result.json()["dir"]) / "kv" / "token").read_text()
    lines = result.stderr.splitlines()
    assert lines[0].startswith("broker: info: policy decision task=fix-build-7")
    assert any(line.startswith("broker: info: minted credential=kv provider=vault reference=") for line in lines)
    revoke = vault_env.run("--verbose", "--log-format", "json", "revoke", "--session", result.json()["session"])
    records = [json.loads(line) for line in revoke.stderr.splitlines()]
    assert [r["message"] for r in records] == ["revoked"]
    assert records[0]["logger"] == "broker.revoke" and records[0]["outcome"] == "revoked"
    for text in (result.stderr, revoke.stderr):
        assert token not in text


def test_without_verbose_nothing_is_logged(vault_env: BrokerEnv) -> None:
    result = vault_env.run("issue", "--task", str(vault_env.write_task(VAULT_TASK)))
    assert result.code == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].startswith("session s-") and "task fix-build-7" in lines[0]
    assert lines[1].startswith("dir ") and "mount it read-only at /run/secrets" in lines[1]


def test_sweep_and_renew_human_output(vault_env: BrokerEnv) -> None:
    document = vault_env.run("issue", "--task", str(vault_env.write_task(VAULT_TASK)), "--json").json()
    sweep = vault_env.run("sweep")
    assert sweep.code == 0 and sweep.stdout.startswith("expired 0, recovered 0, retried 0, orphans removed 0")
    renew = vault_env.run("renew", "--session", document["session"])
    assert renew.code == 0 and renew.stdout.strip().startswith("kv: expires ")
    lint = vault_env.run("policy", "lint")
    assert lint.stdout == "ok: 1 rules in 1 files\n"


def test_sweep_over_many_sessions_shows_a_progress_bar_on_a_terminal(vault_env: BrokerEnv) -> None:
    import os
    import pty
    import subprocess
    import sys

    task = vault_env.write_task(VAULT_TASK.replace("ttl: 20m", "ttl: 1s").replace("    ttl: 10m\n", ""))
    for _ in range(25):
        assert vault_env.run("issue", "--task", str(task)).code == 0
    import time

    time.sleep(1.2)
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "--config", str(vault_env.config_path), "sweep"],
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=follower,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "100"},
    )
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    out, _ = process.communicate(timeout=60)
    os.close(leader)
    assert process.returncode == 0
    assert b"sweeping sessions" in seen
    assert out.decode().startswith("expired 25,")
