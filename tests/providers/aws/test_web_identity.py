"""``web_identity = true``: each session's role assumed with a token the broker signs; no AWS key on the host.

moto does not check web identity tokens at all; the stack's front
(``devstack.identity.aws_front``) does what AWS does first: the issuer an
IAM OIDC provider of the account, the signature against the JWKS fetched
from the issuer's discovery document, ``aud`` the provider's client id,
``exp`` and ``iat``, and the role's trust policy with its ``sub``
condition. The broker runs as a process whose environment holds no AWS
variable and whose home holds no ``~/.aws``.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from broker.core.broker import Broker
from broker.core.inputs.config import load_config
from broker.vocab.errors import ProviderError
from devstack.aws import REGION
from devstack.aws_iam import BUCKET, IamMoto, start_iam_moto
from devstack.identity.aws_trust import BROKER_ROLE_ARN, WEB_ROLE_ARN, web_identity_decisions
from devstack.net import free_port
from tests.fixtures.aws_sts import context, parse
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.identity import IssuerServer

pytestmark = [pytest.mark.server, pytest.mark.root]
SUBJECT = f"broker:{socket.gethostname()}"
POLICY = f"""
rules:
  - id: agents
    tasks: ["fix-*", "ops-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    grants:
      - provider: aws
        roles: ["{WEB_ROLE_ARN}"]
        actions: ["*"]
        max_ttl: 15m
"""


def task(name: str = "fix-aws-1") -> str:
    return f"""
version: 1
task: {name}
ttl: 30m
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
credentials:
  - {{name: store, provider: aws, role_arn: "{WEB_ROLE_ARN}", ttl: 15m}}
"""


@dataclass(frozen=True)
class Trusting:
    """A moto whose account trusts the issuer at ``url`` (served on ``port`` by each test's broker)."""

    moto: IamMoto
    url: str
    port: int


@pytest.fixture(scope="module")
def trusting() -> Iterator[Trusting]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    moto = start_iam_moto(3600, deny_policy=True, issuer=url, broker_subject=SUBJECT)
    try:
        yield Trusting(moto, url, port)
    finally:
        moto.stop()


@dataclass
class Federated:
    env: BrokerEnv
    server: IssuerServer
    trusting: Trusting

    def run(self, *args: str) -> Any:
        """The broker with nothing of AWS's in its environment: no key, no profile, no ~/.aws."""
        home = self.env.root / "home"
        home.mkdir(exist_ok=True)
        return self.env.run_process(*args, env={"PATH": "/usr/bin:/bin", "HOME": str(home)})

    def keys(self, session: str) -> dict[str, str]:
        text = (self.env.runtime_dir / session / "store" / "credentials").read_text()
        pairs = dict(line.split(" = ", 1) for line in text.splitlines() if " = " in line)
        return {
            "aws_access_key_id": pairs["aws_access_key_id"],
            "aws_secret_access_key": pairs["aws_secret_access_key"],
            "aws_session_token": pairs["aws_session_token"],
        }

    def client(self, service: str, **keys: str) -> Any:
        return boto3.client(service, region_name=REGION, endpoint_url=self.trusting.moto.url, **keys)


def federated(tmp_path: Path, trusting: Trusting, **aws: object) -> Federated:
    env = make_env(tmp_path)
    env.tables["identity"] = {"issuer": trusting.url}
    table = {"type": "aws_sts", "region": REGION, "endpoint_url": trusting.moto.url, "web_identity": True, **aws}
    env.add_provider("aws", table)
    env.write_policy(POLICY)
    return Federated(env, IssuerServer(trusting.url, trusting.port, env.config_path).start(), trusting)


@pytest.fixture
def expiring(tmp_path: Path, trusting: Trusting) -> Iterator[Federated]:
    stack = federated(tmp_path, trusting, revoke="expire")
    try:
        yield stack
    finally:
        stack.server.close()
        stack.env.cleanup()


@pytest.fixture
def denying(tmp_path: Path, trusting: Trusting) -> Iterator[Federated]:
    stack = federated(tmp_path, trusting, broker_role_arn=BROKER_ROLE_ARN)
    try:
        yield stack
    finally:
        stack.server.close()
        stack.env.cleanup()


def test_a_sessions_role_is_assumed_with_its_own_token_and_no_aws_key(expiring: Federated) -> None:
    result = expiring.run("issue", "--task", str(expiring.env.write_task(task())), "--json")
    assert result.code == 0, result.stderr
    session = result.json()["session"]
    who = expiring.client("sts", **expiring.keys(session)).get_caller_identity()
    assert who["Arn"] == f"arn:aws:sts::123456789012:assumed-role/agent-web/{session}.store"
    decided = web_identity_decisions(expiring.trusting.moto.url)[-1]
    assert decided["allowed"] and decided["subject"] == f"task:fix-aws-1:session:{session}"
    records = expiring.env.log_records()
    token = next(r for r in records if r["event"] == "identity.token")
    issued = next(r for r in records if r["event"] == "credential.issued")
    assert token["jti"] == decided["jti"] == issued["reference"]["web_identity_jti"]
    assert (token["subject"], token["audience"]) == (decided["subject"], "sts.amazonaws.com")
    doctor = {c["name"]: c for c in json.loads(expiring.run("doctor", "--json").stdout)["checks"]}
    assert doctor["providers.aws.web_identity.keys"]["ok"], doctor["providers.aws.web_identity.keys"]
    assert (
        doctor["providers.aws.identity"]["ok"]
        and "none of the broker's own" in doctor["providers.aws.identity"]["detail"]
    )


def test_a_task_the_roles_trust_does_not_name_gets_nothing(expiring: Federated) -> None:
    """The broker's policy allows ``ops-*``; the role trusts only fix and review sessions (its ``sub`` condition)."""
    result = expiring.run("issue", "--task", str(expiring.env.write_task(task("ops-deploy-1"))))
    assert result.code == 4
    assert "AssumeRoleWithWebIdentity failed: AccessDenied: Not authorized to perform" in result.stderr
    assert "credential.issued" not in expiring.env.events()
    decided = web_identity_decisions(expiring.trusting.moto.url)[-1]
    assert not decided["allowed"] and decided["refused"] == "AccessDenied"


def test_the_broker_role_cuts_a_revoked_session_off_with_its_deny_policy(denying: Federated) -> None:
    result = denying.run("issue", "--task", str(denying.env.write_task(task())), "--json")
    assert result.code == 0, result.stderr
    session = result.json()["session"]
    s3 = denying.client("s3", **denying.keys(session))
    s3.head_bucket(Bucket=BUCKET)
    assert denying.run("revoke", "--session", session).code == 0
    with pytest.raises(ClientError) as denied:
        s3.head_bucket(Bucket=BUCKET)
    assert denied.value.response["Error"]["Code"] in ("403", "AccessDenied")
    subjects = [d["subject"] for d in web_identity_decisions(denying.trusting.moto.url) if d["allowed"]]
    assert SUBJECT in subjects  # the broker's own calls (GetRole, the deny policy) as broker-web
    doctor = {c["name"]: c for c in json.loads(denying.run("doctor", "--json").stdout)["checks"]}
    assert "assumed-role/broker-web/broker-aws" in doctor["providers.aws.identity"]["detail"]


def test_a_clock_aws_refuses_is_named_with_the_fix(expiring: Federated) -> None:
    """The broker's clock ten minutes ahead: its token is issued in the future, and STS says so."""
    broker = Broker.open(load_config(expiring.env.config_path))
    try:
        assert broker.issuer is not None
        ahead = broker.clock() + timedelta(minutes=10)
        broker.issuer.clock = lambda: ahead
        provider = broker.config.providers["aws"]
        later = replace(context(), session_expires_at=ahead + timedelta(hours=1))
        with pytest.raises(ProviderError) as refused:
            provider.mint(parse({"role_arn": WEB_ROLE_ARN}), later)
        message = refused.value.message
        assert "refused the broker's token for its time (InvalidIdentityToken)" in message
        assert "synchronise this host's clock" in message and "\n" not in message
    finally:
        broker.close()
