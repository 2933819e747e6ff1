"""A session's token is good for its audience alone: the sandbox cannot turn it into AWS keys, nor ask for another.

A sandbox holds its ``identity`` token (``NAME/token``) for the audience its
manifest named and a grant listed. With it, the sandbox itself calls
``AssumeRoleWithWebIdentity`` on the role that trusts the broker's issuer: the
token is the broker's, signed, unexpired, with the session's own ``sub``, but
its ``aud`` is not STS's, so AWS (the stack's front, which checks as AWS does)
refuses it, and nothing is assumed. Asking the broker for a token for STS's
audience instead is refused by the policy (exit 3): no grant lists it.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from devstack.aws import REGION
from devstack.aws_iam import IamMoto, start_iam_moto
from devstack.identity.aws_trust import WEB_ROLE_ARN, web_identity_decisions
from devstack.net import free_port
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.identity import IssuerServer

pytestmark = [pytest.mark.server, pytest.mark.root]
AUDIENCE = "https://api.example.com"
POLICY = f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    grants:
      - provider: identity
        audiences: ["{AUDIENCE}"]
"""


def task(audience: str) -> str:
    return f"""
version: 1
task: fix-api-1
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
credentials:
  - {{name: api, provider: identity, audience: "{audience}"}}
"""


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[BrokerEnv, IamMoto]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    moto = start_iam_moto(issuer=url, broker_subject=f"broker:{socket.gethostname()}")
    env = make_env(tmp_path)
    env.tables["identity"] = {"issuer": url}
    env.write_config()
    env.write_policy(POLICY)
    server = IssuerServer(url, port, env.config_path).start()
    try:
        yield env, moto
    finally:
        server.close()
        moto.stop()
        env.cleanup()


def test_a_sandboxs_token_for_its_api_does_not_assume_the_role_trusting_the_issuer(
    stack: tuple[BrokerEnv, IamMoto],
) -> None:
    env, moto = stack
    issued = env.run_process("issue", "--task", str(env.write_task(task(AUDIENCE))), "--json")
    assert issued.code == 0, issued.stderr
    session = issued.json()["session"]
    token = (env.runtime_dir / session / "api" / "token").read_text()  # what the sandbox reads
    sts = boto3.client("sts", region_name=REGION, endpoint_url=moto.url, config=Config(signature_version=UNSIGNED))
    with pytest.raises(ClientError) as refused:
        sts.assume_role_with_web_identity(RoleArn=WEB_ROLE_ARN, RoleSessionName="mine", WebIdentityToken=token)
    assert refused.value.response["Error"]["Code"] == "InvalidIdentityToken"
    assert "Incorrect token audience" in refused.value.response["Error"]["Message"]
    assert web_identity_decisions(moto.url)[-1] == {
        "role": WEB_ROLE_ARN,
        "session_name": "mine",
        "subject": None,
        "jti": None,
        "allowed": False,
        "refused": "InvalidIdentityToken",
    }


def test_a_token_for_stss_audience_is_not_handed_out_without_a_grant(stack: tuple[BrokerEnv, IamMoto]) -> None:
    env, _ = stack
    result = env.run_process("issue", "--task", str(env.write_task(task("sts.amazonaws.com"))))
    assert result.code == 3
    assert "audience 'sts.amazonaws.com' is not one the grant lists" in result.stderr
    assert "credential.issued" not in env.events() and env.session_dirs() == []
