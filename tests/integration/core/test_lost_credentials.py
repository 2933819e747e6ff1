"""Credentials the broker could lose track of, found again: a GitHub token whose kept copy is lost, a token the
keep-safe cannot hold, a store write failing after a mint, a rejected token whose revocation fails, and an AWS
session whose AssumeRole answer never came back because the broker was killed first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from broker.core.broker import Broker
from broker.core.inputs.config import load_config
from broker.core.sweeping import SweepReport, sweep
from broker.vocab.time import parse_iso
from devstack.github_app import GitHubAppEmulator
from tests.fixtures.aws import ACCOUNT, ROLE_ARN, AwsRole
from tests.fixtures.aws_sts import deny_document
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.crash import add_github, github_tokens, start_issue, tokens_of, wait_for
from tests.fixtures.github import APP_ID, AppKeys, write_key
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.slowproxy import slow_proxy

pytestmark = pytest.mark.server


GITHUB_POLICY = """
rules:
  - id: agents-widgets
    tasks: ["fix-*"]
    sandbox_uids: ["0-65534"]
    sandbox_gids: ["0-65534"]
    max_ttl: 1h
    grants:
      - provider: github
        repositories: ["octo-org/widgets"]
        permissions: {contents: write}
"""
GITHUB_TASK = """
version: 1
task: fix-build-9
ttl: 10m
sandbox: {uid: 1000, gid: 1000, mount_path: /run/secrets}
credentials:
  - {name: repo, provider: github, repositories: [octo-org/widgets], permissions: {contents: write}}
"""


def _sweep_at(env: BrokerEnv, moment: datetime) -> SweepReport:
    """One sweep by the broker's own code with its clock set to ``moment`` (the CLI always uses now)."""
    broker = Broker.open(load_config(env.config_path))
    broker.clock = lambda: moment
    try:
        return sweep(broker)
    finally:
        broker.close()


def test_a_github_token_whose_kept_copy_is_lost_settles_as_expired_after_its_hour(
    tmp_path: Path, github_emulator: GitHubAppEmulator, github_app_keys: AppKeys
) -> None:
    """The keep-safe is gone (a reboot): pending while GitHub still honours the token, expired after."""
    env = make_env(tmp_path)
    key = write_key(env.root / "github-app.pem", github_app_keys.private_pem)
    env.add_provider(
        "github",
        {"type": "github_app", "app_id": str(APP_ID), "private_key_file": str(key), "api_url": github_emulator.api_url},
    )
    env.write_policy(GITHUB_POLICY)
    try:
        document = env.run("issue", "--task", str(env.write_task(GITHUB_TASK)), "--json").json()
        session = document["session"]
        token = (Path(document["dir"]) / "repo" / "token").read_text()
        kept = env.runtime_dir / ".keep" / f"{session}.repo"
        assert kept.exists()
        kept.unlink()  # what a reboot does to the tmpfs keep-safe
        revoked = env.run("revoke", "--session", session, "--json")
        assert revoked.code == 5 and revoked.json()["credentials"][0]["outcome"] == "pending"
        still = env.run("sweep", "--json")
        assert still.code == 5 and still.json()["pending"] == [{"session": session, "credential": "repo"}]
        assert github_emulator.token_state(token) == "valid"
        [issued] = [r for r in env.log_records() if r["event"] == "credential.issued"]
        credential_end = parse_iso(document["credentials"][0]["expires_at"])  # the session's end: 10 minutes
        github_end = parse_iso(issued["reference"]["token_expires_at"])  # GitHub's hour
        assert credential_end < github_end
        # Past the credential's own end but inside GitHub's hour: the token still works, so not settled.
        assert _sweep_at(env, credential_end + timedelta(minutes=5)).pending == [
            {"session": session, "credential": "repo"}
        ]
        github_emulator.advance(3601)
        assert github_emulator.token_state(token) == "expired"
        settled = _sweep_at(env, github_end + timedelta(seconds=1))
        assert settled.pending == [] and settled.recovered == [session]
        assert env.run("sweep", "--json").code == 0
        records = [r for r in env.log_records() if r["event"] == "credential.revoked"]
        assert [(r["session"], r["credential"], r["outcome"]) for r in records] == [(session, "repo", "expired")]
        [status] = env.run("status", "--all", "--json").json()
        assert status["state"] == "revoked" and status["credentials"][0]["state"] == "expired"
        assert env.run("audit", "verify").code == 0
    finally:
        env.cleanup()


# -- credentials minted but not recorded -------------------------------------------------


def _withheld(env: BrokerEnv) -> dict[str, Any]:
    [record] = [r for r in env.log_records() if r["event"] == "credential.issued" and "withheld" in r]
    return record


def _lookup(env: BrokerEnv, secret: str) -> list[dict[str, Any]]:
    leaked = env.root / "leaked"
    leaked.write_text(secret)
    result = env.run("audit", "lookup", "--secret-file", str(leaked), "--json")
    assert result.code == 0, result.stderr
    found: list[dict[str, Any]] = result.json()
    return found


@pytest.mark.server
def test_a_token_the_keep_safe_cannot_hold_is_revoked_at_once(
    broker_env: BrokerEnv, github_emulator: GitHubAppEmulator, github_app_keys: AppKeys
) -> None:
    task = add_github(broker_env, github_emulator, github_app_keys)
    broker_env.runtime_dir.mkdir(mode=0o711)
    (broker_env.runtime_dir / ".keep").write_text("not a directory")  # the keep-safe write fails after the mint
    result = broker_env.run("issue", "--task", str(task), "--json")
    assert result.code == 4, result.stderr
    assert "what was minted has been rolled back" in result.stderr
    [(token, state)] = github_tokens(github_emulator).items()
    assert state == "revoked"
    record = _withheld(broker_env)
    assert record["withheld"].startswith("not recorded: ") and record["fingerprint"].startswith("hmac-sha256:")
    assert [m["credential"] for m in _lookup(broker_env, token)] == ["repo"]  # found by its fingerprint
    revoked = [r for r in broker_env.log_records() if r["event"] == "credential.revoked"]
    assert [(r["reason"], r["outcome"]) for r in revoked] == [("withheld", "revoked")]
    assert broker_env.run("audit", "verify").code == 0


@pytest.mark.server
def test_a_store_write_failing_after_a_mint_still_revokes_it(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    """The store refuses to record the minted token (a trigger in its database makes the write fail)."""
    assert vault_env.run("status").code == 0  # creates the store
    with contextlib.closing(sqlite3.connect(vault_env.state_dir / "sessions.db")) as db:
        db.execute(
            "CREATE TRIGGER refuse_active BEFORE UPDATE ON credentials WHEN NEW.state = 'active'"
            " BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
        )
        db.commit()
    result = vault_env.run("issue", "--task", str(vault_env.write_task(VAULT_TASK)), "--json")
    assert result.code == 4, result.stderr
    assert "session store" in result.stderr and "what was minted has been rolled back" in result.stderr
    record = _withheld(vault_env)
    assert record["reference"]["accessor"] and record["fingerprint"].startswith("hmac-sha256:")
    assert not openbao.accessor_exists(record["reference"]["accessor"])
    assert tokens_of(openbao, record["session"]) == []
    [session] = vault_env.run("status", "--all", "--json").json()
    assert session["state"] == "failed" and session["credentials"][0]["state"] == "revoked"


@pytest.mark.server
def test_a_rejected_token_whose_revocation_fails_stays_pending_until_sweep(
    broker_env: BrokerEnv, github_emulator: GitHubAppEmulator, github_app_keys: AppKeys
) -> None:
    task = add_github(broker_env, github_emulator, github_app_keys)
    github_emulator.state.overgrant = "permissions"  # fails the post-mint check
    github_emulator.fail_revocations = True  # and the immediate revoke
    result = broker_env.run("issue", "--task", str(task), "--json")
    assert result.code == 4, result.stderr
    assert "its permissions differ from the request" in result.stderr
    assert "revoking it failed; it stays pending for broker sweep" in result.stderr
    [(token, state)] = github_tokens(github_emulator).items()
    assert state == "valid"
    assert token not in result.stderr
    [session] = broker_env.run("status", "--all", "--json").json()
    assert session["credentials"][0]["state"] == "pending"
    assert [m["credential"] for m in _lookup(broker_env, token)] == ["repo"]
    assert "credential.revoke_failed" in broker_env.events()
    assert broker_env.run("sweep", "--json").code == 5  # GitHub still refuses
    github_emulator.fail_revocations = False
    swept = broker_env.run("sweep", "--json")
    assert swept.code == 0, swept.stderr
    assert github_emulator.token_state(token) == "revoked"
    assert broker_env.run("status", "--all", "--json").json()[0]["credentials"][0]["state"] == "revoked"
    assert broker_env.run("audit", "verify").code == 0


AWS_POLICY = f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: ["0-65534"]
    sandbox_gids: ["0-65534"]
    grants:
      - {{provider: aws, roles: ["{ROLE_ARN}"], actions: ["s3:GetObject"]}}
"""
AWS_TASK = f"""
version: 1
task: fix-build-5
ttl: 20m
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
credentials:
  - name: artifacts
    provider: aws
    role_arn: {ROLE_ARN}
    ttl: 15m
    session_policy:
      Version: "2012-10-17"
      Statement:
        - {{Effect: Allow, Action: ["s3:GetObject"], Resource: ["arn:aws:s3:::ci-artifacts/*"]}}
"""


@pytest.mark.server
@pytest.mark.skipif(os.geteuid() != 0, reason="issues files for uid 1000")
def test_sigkill_before_the_assume_role_answer_is_denied_by_sweep(broker_env: BrokerEnv, aws_role: AwsRole) -> None:
    """AWS has assumed the role, the broker is killed before it hears back: the store knows only the
    credential's name, and sweep denies the session by the name the broker gave it."""
    moto_port = urlparse(aws_role.endpoint_url).port or 0
    with slow_proxy(moto_port, delay=60, hold=b"Action=AssumeRole") as proxy:
        broker_env.add_provider(
            "aws", {"type": "aws_sts", "region": "us-east-1", "endpoint_url": proxy.addr, "timeout": 90}
        )
        broker_env.write_policy(AWS_POLICY)
        process = start_issue(broker_env, broker_env.write_task(AWS_TASK))
        try:
            wait_for(lambda: bool(_assumed_sessions()) or process.poll() is not None)
            assert process.poll() is None, process.communicate()
            [session_name] = _assumed_sessions()
            process.send_signal(signal.SIGKILL)
            process.wait(10)
        finally:
            process.kill()
        session = session_name.split(".")[0]
        [live] = broker_env.run("status", "--json").json()
        assert (live["session"], live["state"], live["credentials"][0]["state"]) == (session, "issuing", "minting")
        result = broker_env.run("sweep", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["recovered"] == [session]
    # The crashed session's credentials carry SourceIdentity = the broker session id: the deny names it.
    [statement] = deny_document(aws_role)["Statement"]
    assert statement["Effect"] == "Deny" and statement["Condition"]["StringEquals"]["aws:SourceIdentity"] == [session]
    assert session_name.startswith(f"{session}.")
    assert credential_state(broker_env) == "revoked"
    assert broker_env.run("audit", "verify").code == 0


def _assumed_sessions() -> list[str]:
    from moto.sts.models import sts_backends

    return [role.session_name for role in sts_backends[ACCOUNT]["aws"].assumed_roles]


def credential_state(env: BrokerEnv) -> str:
    [session] = env.run("status", "--all", "--json").json()
    return str(session["credentials"][0]["state"])
