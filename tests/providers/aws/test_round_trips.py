"""The AWS calls of one direct ``issue`` and one ``revoke``, counted on the wire, so a regression shows.

A keep-alive proxy (``tests/fixtures/latencyproxy.py``) between the broker
and the moto server records every query ``Action`` and the connection it
came on. Each call left buys a guarantee (``providers.aws`` says which); the
reads that do not depend on each other go out together, so the critical path
of an issue is one round of reads and the AssumeRole, of a revoke one round of
reads and the PutRolePolicy; the floor (``bench/floor.py``) needs as many.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from devstack.aws import create_role
from tests.fixtures.aws import REGION, AwsRole, iam_client
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.latencyproxy import LatencyProxy, latency_proxy
from tests.providers.aws.test_budget import POLICY, TASK, issue_in, opened

pytestmark = pytest.mark.server

#: Read side by side before the AssumeRole / PutRolePolicy (their order on the wire is not fixed).
RESERVATION_READS = ["GetRole", "GetRolePolicy", "ListRolePolicies"]


@pytest.fixture
def counted(tmp_path: Path, aws_role: AwsRole) -> Iterator[tuple[BrokerEnv, LatencyProxy]]:
    port = urlsplit(aws_role.endpoint_url).port
    assert port is not None
    with latency_proxy(port) as proxy:
        env = make_env(tmp_path)
        env.add_provider("aws", {"type": "aws_sts", "region": REGION, "endpoint_url": proxy.addr})
        env.write_policy(POLICY)
        env.write_task(TASK)
        try:
            yield env, proxy
        finally:
            env.cleanup()


def test_issue_reads_the_role_once_and_proves_nothing_twice(counted: tuple[BrokerEnv, LatencyProxy]) -> None:
    """Issue: GetRole, ListRolePolicies and GetRolePolicy together, then AssumeRole; no second GetRole,
    no GetCallerIdentity (the AssumeRole answer names the session), and no connection of its own for it."""
    env, proxy = counted
    issued = env.run("issue", "--task", str(env.root / "task.yaml"), "--json")
    assert issued.code == 0, issued.stderr
    calls = proxy.calls()
    assert sorted(calls[:3]) == RESERVATION_READS
    assert calls[3:] == ["AssumeRole"]
    # Three reads side by side open at most three IAM connections; AssumeRole one STS connection.
    assert proxy.connections <= 4


def test_revoke_checks_the_role_alongside_the_reads_and_writes_once(counted: tuple[BrokerEnv, LatencyProxy]) -> None:
    """Revoke: GetRole (the role id), ListRolePolicies and GetRolePolicy together, then PutRolePolicy, no
    read back: the host lock shuts out every other writer."""
    env, proxy = counted
    issued = env.run("issue", "--task", str(env.root / "task.yaml"), "--json")
    assert issued.code == 0, issued.stderr
    mark = len(proxy.actions)
    revoked = env.run("revoke", "--session", issued.json()["session"], "--json")
    assert revoked.code == 0, revoked.stderr
    calls = proxy.calls(mark)
    assert sorted(calls[:3]) == RESERVATION_READS
    assert calls[3:] == ["PutRolePolicy"]


def test_the_reserved_role_answer_does_not_outlive_its_reservation(tmp_path: Path, aws_role: AwsRole) -> None:
    """A warm broker (one process, many issues) reads the role again for each: a recreated role is seen."""
    env = make_env(tmp_path)
    env.add_provider("aws", {"type": "aws_sts", "region": REGION, "endpoint_url": aws_role.endpoint_url})
    env.write_policy(POLICY)
    env.write_task(TASK)
    try:
        with opened(env) as broker:
            first = issue_in(broker, env)
            iam = iam_client(aws_role.endpoint_url)
            iam.delete_role(RoleName=aws_role.name)
            recreated = create_role(aws_role.endpoint_url)["RoleId"]
            assert recreated != aws_role.role_id
            second = issue_in(broker, env)
            ids = {
                c.session_id: c.reference["role_id"] for c in broker.store.live_credentials("aws", datetime.now(UTC))
            }
    finally:
        env.cleanup()
    assert ids == {first: aws_role.role_id, second: recreated}
