"""Fleet mode and the AWS deny policy: three hosts revoking on one role at once lose no entry.

Three brokers (separate config, state and runtime dirs; one PostgreSQL
store) each revoke twenty sessions of one role on moto, all sixty at once.
IAM's read-after-write lag is played by the SDK's own hook on each broker's
IAM client: ``GetRolePolicy`` answers with the policy as it stood before the
storm, the worst a lagging replica can do. The stored policy at the end is
the assertion.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from broker.core.broker import Broker
from broker.core.inputs.config import load_config
from broker.core.inputs.manifest import load_manifest
from broker.core.issuing import issue
from broker.core.revoking import revoke_session
from broker.core.sweeping import sweep
from broker.vocab.errors import StoreError
from providers.aws.deny_policy.layout import POLICY_NAME, SOURCE_IDENTITY, DenyList
from providers.aws.provider import AwsStsProvider
from tests.fixtures.aws import REGION, AwsRole, iam_client
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.fleet import FleetDb, create_fleet_db, join_fleet
from tests.fixtures.postgres import Postgres
from tests.providers.aws.test_budget import POLICY, TASK

pytestmark = pytest.mark.server

HOSTS = ("host-a", "host-b", "host-c")
PER_HOST = 20


@pytest.fixture
def fleet_db(postgres: Postgres, tmp_path: Path) -> FleetDb:
    return create_fleet_db(postgres, tmp_path)


@contextlib.contextmanager
def aws_fleet(tmp_path: Path, role: AwsRole, db: FleetDb) -> Iterator[list[Broker]]:
    envs: list[BrokerEnv] = []
    for name in HOSTS:
        folder = tmp_path / name
        folder.mkdir()
        env = make_env(folder)
        env.add_provider("aws", {"type": "aws_sts", "region": REGION, "endpoint_url": role.endpoint_url})
        env.write_policy(POLICY)
        env.write_task(TASK)
        envs.append(join_fleet(env, db, name))
    brokers = [Broker.open(load_config(env.config_path)) for env in envs]
    try:
        yield brokers
    finally:
        for broker in brokers:
            broker.close()
        for env in envs:
            env.cleanup()


def issue_in(broker: Broker) -> str:
    manifest = load_manifest(str(broker.config.path.parent / "task.yaml"), broker.config)
    return issue(broker, manifest).id


def stored_deny(role: AwsRole) -> DenyList:
    document = iam_client(role.endpoint_url).get_role_policy(RoleName=role.name, PolicyName=POLICY_NAME)
    return DenyList.parse(document["PolicyDocument"])


class _Ok:
    status_code = 200


def lag_reads(broker: Broker, role: AwsRole, stale: dict[str, Any]) -> None:
    """Every ``GetRolePolicy`` of the deny policy by this broker answers ``stale`` (a lagging IAM replica)."""

    def answer(params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]] | None:
        if params.get("body", {}).get("PolicyName") != POLICY_NAME:
            return None
        text = quote(json.dumps(stale))  # as IAM sends it; botocore decodes it after the call
        return _Ok(), {"RoleName": role.name, "PolicyName": POLICY_NAME, "PolicyDocument": text}

    provider = broker.config.providers["aws"]
    assert isinstance(provider, AwsStsProvider)
    provider.clients.client("iam").meta.events.register("before-call.iam.GetRolePolicy", answer)


def test_three_hosts_twenty_concurrent_revocations_each_lose_no_entry_despite_stale_reads(
    tmp_path: Path, aws_role: AwsRole, fleet_db: FleetDb
) -> None:
    with aws_fleet(tmp_path, aws_role, fleet_db) as brokers:
        first = issue_in(brokers[0])
        assert revoke_session(brokers[0], first).complete  # the policy exists before the storm
        stale = iam_client(aws_role.endpoint_url).get_role_policy(RoleName=aws_role.name, PolicyName=POLICY_NAME)
        sessions = [(broker, issue_in(broker)) for broker in brokers for _ in range(PER_HOST)]
        for broker in brokers:
            lag_reads(broker, aws_role, stale["PolicyDocument"])
        barrier = threading.Barrier(len(sessions))
        outcomes: dict[str, list[str]] = {}

        def run(broker: Broker, session: str) -> None:
            barrier.wait()
            try:
                report = revoke_session(broker, session)
                outcomes[session] = [c.outcome for c in report.credentials]
            except Exception as exc:  # reported by the assertion below
                outcomes[session] = [repr(exc)]

        threads = [threading.Thread(target=run, args=pair) for pair in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    errors = {r.get("error") for r in _records(fleet_db) if r["event"] == "credential.revoke_failed"}
    assert outcomes == {session: ["revoked"] for _, session in sessions}, errors
    denied = stored_deny(aws_role).values(SOURCE_IDENTITY)
    assert denied == sorted([first, *(session for _, session in sessions)])  # 61 entries, none lost


def _records(db: FleetDb) -> list[dict[str, Any]]:
    """The fleet's log: one chain in the store for every host."""
    import psycopg

    with psycopg.connect(db.url, passfile=str(db.passfile), connect_timeout=10) as conn:
        return [json.loads(row[0]) for row in conn.execute("SELECT record FROM issuance_log ORDER BY seq")]


def test_a_role_lock_lost_during_the_policy_write_fails_the_revoke_and_sweep_rewrites_the_policy(
    tmp_path: Path, aws_role: AwsRole, fleet_db: FleetDb, postgres: Postgres
) -> None:
    """The server ends the broker's store connection (holding the role's lock) while it writes the deny policy:
    another host may have written meanwhile, so the revoke must not report success; sweep writes it again."""
    with aws_fleet(tmp_path, aws_role, fleet_db) as brokers:
        broker = brokers[0]
        session = issue_in(broker)
        cut: list[bool] = []

        def end_connection(**_: Any) -> None:
            if not cut:
                cut.append(end_advisory_lock_holders(postgres, fleet_db))

        provider = broker.config.providers["aws"]
        assert isinstance(provider, AwsStsProvider)
        provider.clients.client("iam").meta.events.register("before-call.iam.PutRolePolicy", end_connection)
        with pytest.raises(StoreError, match="lost"):
            revoke_session(broker, session)
        provider.clients.client("iam").meta.events.unregister("before-call.iam.PutRolePolicy", end_connection)
        assert cut == [True]
        assert broker.store.get_session(session).state == "revoking"  # type: ignore[union-attr]
        report = sweep(brokers[1])
        assert report.recovered == [session] and report.complete
    assert stored_deny(aws_role).values(SOURCE_IDENTITY) == [session]


def end_advisory_lock_holders(postgres: Postgres, db: FleetDb) -> bool:
    """Terminate the backend(s) holding advisory locks in ``db`` (the server ending a broker's connection)."""
    rows = postgres.query(
        "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
        " WHERE l.locktype = 'advisory' AND l.granted AND d.datname = %s GROUP BY l.pid",
        db.name,
    )
    return bool(rows) and all(row[0] for row in rows)
