"""The AWS deny budget through the real CLI against moto: room reserved at issue, revocations that always fit.

moto stores inline policies of any size and enforces none of them, so the
assertions are on the stored deny policy (its entries and its size as IAM
counts it) and on what the broker refused to mint.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from broker.core.broker import Broker
from broker.core.inputs.config import load_config
from broker.core.inputs.manifest import load_manifest
from broker.core.issuing import issue
from broker.core.revoking import revoke_session
from broker.vocab.errors import PolicyDenied
from providers.aws.deny_policy.layout import (
    POLICY_NAME,
    ROLE_INLINE_BUDGET,
    SOURCE_IDENTITY,
    DenyList,
    entries_for,
    policy_size,
)
from tests.fixtures.aws import ACCOUNT, REGION, ROLE_ARN, AwsRole, iam_client
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.gate import gate
from tests.fixtures.openbao import ROOT_TOKEN, OpenBao
from tests.fixtures.tls import backend_port

pytestmark = pytest.mark.server

POLICY = f"""
rules:
  - id: agents
    description: coding agents with the CI role
    tasks: ["fix-*"]
    sandbox_uids: ["0-65534"]
    sandbox_gids: ["0-65534"]
    max_ttl: 1h
    grants:
      - provider: aws
        roles: ["{ROLE_ARN}"]
        actions: ["*"]
        max_ttl: 15m
"""

TASK = f"""
version: 1
task: fix-build-123
ttl: 30m
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
credentials:
  - name: artifacts
    provider: aws
    role_arn: {ROLE_ARN}
    ttl: 15m
"""


@pytest.fixture
def aws_env(tmp_path: Path, aws_role: AwsRole) -> Iterator[BrokerEnv]:
    env = make_env(tmp_path)
    env.add_provider("aws", {"type": "aws_sts", "region": REGION, "endpoint_url": aws_role.endpoint_url})
    env.write_policy(POLICY)
    env.write_task(TASK)
    try:
        yield env
    finally:
        env.cleanup()


@contextlib.contextmanager
def opened(env: BrokerEnv) -> Iterator[Broker]:
    """The broker's core on this env's config, kept open so the AWS clients are built once."""
    broker = Broker.open(load_config(env.config_path))
    try:
        yield broker
    finally:
        broker.close()


def issue_in(broker: Broker, env: BrokerEnv) -> str:
    document = issue(broker, load_manifest(str(env.root / "task.yaml"), broker.config))
    return document.id


def put_filler(role: AwsRole, size: int) -> int:
    """An operator's inline policy of ``size`` characters (as IAM counts them) on the role."""
    rule = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": ""}
    base = {"Version": "2012-10-17", "Statement": [rule]}
    rule["Resource"] = "arn:aws:s3:::" + "f" * (size - policy_size(base) - len("arn:aws:s3:::"))
    assert policy_size(base) == size
    iam_client(role.endpoint_url).put_role_policy(
        RoleName=role.name, PolicyName="operator", PolicyDocument=json.dumps(base, indent=2)
    )
    return size


def stored_deny(role: AwsRole) -> dict[str, Any] | None:
    iam = iam_client(role.endpoint_url)
    if POLICY_NAME not in iam.list_role_policies(RoleName=role.name)["PolicyNames"]:
        return None
    document: dict[str, Any] = iam.get_role_policy(RoleName=role.name, PolicyName=POLICY_NAME)["PolicyDocument"]
    return document


def assumed_sessions() -> int:
    from moto.sts.models import sts_backends

    return len(sts_backends[ACCOUNT]["aws"].assumed_roles)


def test_two_hundred_live_sessions_all_revoke_and_the_next_issue_is_denied(
    aws_env: BrokerEnv, aws_role: AwsRole
) -> None:
    """200 sessions on one role, none revoked yet: their revocations are reserved, the next issue is refused."""
    with opened(aws_env) as broker:
        sessions = [issue_in(broker, aws_env) for _ in range(200)]
    assert assumed_sessions() == 200 and stored_deny(aws_role) is None
    before = aws_env.run("status", "--json").json()[0]["credentials"][0]["deny_budget"]
    assert before["live_sessions"] == 200 and before["used"] == 0 and not before["full"]
    assert before["reserved"] < 4_000  # 200 sessions in one or two buckets: about 17 characters each
    # An operator's policy takes all but a few characters of what the 200 revocations leave free.
    filler = put_filler(aws_role, ROLE_INLINE_BUDGET - 5 - before["reserved"])

    denied = aws_env.run("issue", "--task", str(aws_env.root / "task.yaml"), "--json")
    assert denied.code == 3, denied.stderr
    assert "role agent-ci has 200 live broker session(s)" in denied.stderr
    assert assumed_sessions() == 200  # nothing minted
    record = aws_env.log_records()[-2]  # the last one is the checkpoint
    assert record["event"] == "session.denied" and record["session"] is None
    assert record["reasons"] == ["role agent-ci: no room to revoke another session next to 200 live one(s)"]

    status = aws_env.run("status", "--json")
    assert status.code == 0 and len(status.json()) == 200
    budgets = [c["deny_budget"] for item in status.json() for c in item["credentials"]]
    assert budgets[0] == {
        "role": ROLE_ARN,
        "live_sessions": 200,
        "used": filler,
        "reserved": ROLE_INLINE_BUDGET - 5,
        "limit": ROLE_INLINE_BUDGET,
        "full": True,
    }
    assert all(b == budgets[0] for b in budgets) and len(budgets) == 200
    doctor = aws_env.run("doctor", "--json")
    checks = {c["name"]: c for c in doctor.json()["checks"]}
    check = checks["providers.aws.deny_budget.agent-ci"]
    assert doctor.code == 2 and not check["ok"] and "200 live session(s)" in check["detail"]
    assert "no room to revoke another session" in check["fix"]

    revoked = aws_env.run("revoke", "--task", "fix-build-123", "--json")
    assert revoked.code == 0, revoked.stderr
    document = stored_deny(aws_role)
    assert document is not None
    assert DenyList.parse(document).values(SOURCE_IDENTITY) == sorted(sessions)
    assert policy_size(document) == before["reserved"] < ROLE_INLINE_BUDGET  # exactly what was reserved


def test_an_agent_cycling_issue_and_revoke_cannot_exhaust_the_budget(aws_env: BrokerEnv, aws_role: AwsRole) -> None:
    """Fast cycles fill the room until issues are refused (every revocation still lands); later it is free again."""
    put_filler(aws_role, ROLE_INLINE_BUDGET - (39 + 148 * 2 + 17 * 8))  # 8 to 16 sessions' revocations
    outcomes = []
    with opened(aws_env) as broker:
        for _ in range(30):
            try:
                session = issue_in(broker, aws_env)
            except PolicyDenied as exc:
                denial = exc.message
                break
            report = revoke_session(broker, session)
            outcomes += [c["outcome"] for c in report.to_json()["credentials"]]
        else:
            pytest.fail("30 sessions fitted in room for at most 16")
    assert 8 <= len(outcomes) <= 16 and set(outcomes) == {"revoked"}
    assert f"role agent-ci has {len(outcomes)} live broker session(s)" in denial
    document = stored_deny(aws_role)
    assert document is not None and len(DenyList.parse(document).values(SOURCE_IDENTITY)) == len(outcomes)

    # Three hours on, every one of those sessions has expired and its entry has ended: the room is back.
    with opened(aws_env) as broker:
        later = datetime.now(UTC) + timedelta(hours=3)
        broker.clock = lambda: later
        session = issue_in(broker, aws_env)
        report = revoke_session(broker, session)
    assert [c["outcome"] for c in report.to_json()["credentials"]] == ["expired"]
    assert stored_deny(aws_role) is None  # pruned to nothing, so deleted


def test_two_issues_racing_for_the_last_room_do_not_both_get_it(aws_env: BrokerEnv, aws_role: AwsRole) -> None:
    """Two brokers on this host (separate processes' worth of state) issue at once with room for one revocation."""
    one = DenyList().merged(entries_for("", "s-000000000000", datetime.now(UTC) + timedelta(minutes=15)))
    put_filler(aws_role, ROLE_INLINE_BUDGET - policy_size(one.document()) - 10)  # a second entry needs 17 more
    barrier = threading.Barrier(2)
    results: list[str] = []

    def run() -> None:
        with opened(aws_env) as broker:
            barrier.wait()
            try:
                results.append(issue_in(broker, aws_env))
            except PolicyDenied as exc:
                results.append(exc.message)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    issued = [r for r in results if r.startswith("s-")]
    assert len(results) == 2 and len(issued) == 1, results
    assert assumed_sessions() == 1
    assert "role agent-ci has 1 live broker session(s)" in next(r for r in results if not r.startswith("s-"))


def test_renewing_an_aws_credential_does_not_deny_its_successor(aws_env: BrokerEnv, aws_role: AwsRole) -> None:
    """Revoking the credential a renewal replaced denies that credential only: the renewed one has its own
    session name and source identity, so no entry of the role's deny policy matches it. (moto enforces no
    IAM, so the check is on the stored policy: before the fix both generations shared both keys.)"""
    document = aws_env.run("issue", "--task", str(aws_env.root / "task.yaml"), "--json").json()
    session = document["session"]
    renewed = aws_env.run("renew", "--session", session, "--json")
    assert renewed.code == 0, renewed.stderr
    assert [r["old_outcome"] for r in renewed.json()] == ["revoked"]
    issued = [r for r in aws_env.log_records() if r["event"] == "credential.issued"]
    old, new = issued[0]["reference"], issued[-1]["reference"]
    assert issued[-1]["renewal_of"] == "artifacts~1"
    assert new["assumed_role_id"] != old["assumed_role_id"] and new["source_identity"] != old["source_identity"]
    assert new["source_identity"].startswith(session)
    denied = DenyList.parse(stored_deny(aws_role))
    values = {entry.value for entry in denied.entries}
    assert old["source_identity"] in values or old["assumed_role_id"] in values
    assert new["source_identity"] not in values and new["assumed_role_id"] not in values
    assert aws_env.run("revoke", "--session", session).code == 0
    values = {entry.value for entry in DenyList.parse(stored_deny(aws_role)).entries}
    assert new["source_identity"] in values
    assert aws_env.run("audit", "verify").code == 0


def test_an_issue_held_up_by_another_provider_does_not_hold_the_role_for_the_next(
    aws_env: BrokerEnv, aws_role: AwsRole, openbao: OpenBao
) -> None:
    """The role's reservation ends once this issue's AWS credentials are recorded, not when the whole issue
    does: issue A, its AWS session minted and its Vault token held up at the provider, must not keep issue B
    on the same role waiting (before, B queued behind A's whole issue, its log records and its delivery)."""
    env = aws_env
    with gate(backend_port(openbao.addr), hold=b"/v1/auth/token/create") as held:
        env.add_provider(
            "vault",
            {
                "type": "vault",
                "addr": held.addr,
                "token_file": str(env.write_secret("vault-token", ROOT_TOKEN)),
                "token_role": "broker-session",
                "timeout": 120,  # A waits at the gate for as long as the test holds it
            },
        )
        env.write_policy(POLICY + '      - {provider: vault, policies: ["ci-*"], max_uses: 100}\n')
        vault = "  - {name: kv, provider: vault, policies: [ci-read], ttl: 10m, num_uses: 5}\n"
        both = env.write_task(TASK + vault, "both.yaml")
        outcome: dict[str, Any] = {}

        def issue_both() -> None:
            with opened(env) as broker:
                outcome["a"] = issue(broker, load_manifest(str(both), broker.config)).id

        first = threading.Thread(target=issue_both)
        first.start()
        try:
            assert held.arrived.wait(60), "issue A never reached its Vault mint"
            # B is another process, as another launcher's broker is: the role's host lock stands between them.
            try:
                second = env.run_process("issue", "--task", str(env.root / "task.yaml"), "--json", timeout=50)
            except subprocess.TimeoutExpired:
                pytest.fail("issue B waited on the role while issue A was held up at Vault")
            assert second.code == 0, second.stderr
            assert "a" not in outcome  # A is still held: B did not wait for it
        finally:
            held.released.set()
            first.join(120)
    assert "a" in outcome
    b = second.json()["session"]
    issued = [r["session"] for r in env.log_records() if r["event"] == "session.issued"]
    assert sorted(issued) == sorted([outcome["a"], b])
    assert env.run("revoke", "--task", "fix-build-123").code == 0
    assert DenyList.parse(stored_deny(aws_role)).values(SOURCE_IDENTITY) == sorted([outcome["a"], b])
