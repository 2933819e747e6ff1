"""From inside a real sandbox, ``sts:AssumeRole`` through the AWS re-signer hands out no new credentials.

The attack (review 4, F1): with an ``inject: proxy`` AWS credential, the proxy verified any request signed with
the placeholder keys and re-signed it with the session's real STS keys, whatever its action. The session's role
may assume another (role chaining, ``deploy``), so the sandbox's boto3 called ``assume_role`` and got that role's
keys in clear (the masker knows only the session's own), real keys usable from anywhere, not behind the proxy,
and alive after the session's revocation (its Deny is on the session's role only).

Stack: moto with IAM authentication on (it checks every signature and evaluates identity policies), behind TLS
(``tests.fixtures.aws_iam.chained_moto``); ``broker exec --sandbox bwrap --network allowlist`` with
``inject: proxy`` and ``revoke = "deny-policy"``. Now the proxy re-signs only the STS actions it lists
(``GetCallerIdentity``), refuses ``AssumeRole`` before re-signing (403 AccessDenied, STS's XML, an
``egress.refused`` record with reason ``action``, nothing reaches moto), and the session policy AWS holds for a
proxied credential denies minting credentials itself. moto keeps a session's policy but enforces none, so the
policy it holds is read back and evaluated with moto's own policy evaluator.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.iam.access_control import IAMPolicy, PermissionResult

from devstack.aws import REGION
from devstack.aws_iam import BUCKET, CHAINED_ARN, received, sessions
from tests.fixtures.aws_iam import IamStack, chained_moto
from tests.fixtures.aws_proxied import AwsProxied, lines_json, proxied_stack, py, refusals_of, requests_of
from tests.fixtures.sandbox import sandbox_unavailable

__all__ = ["chained_moto"]  # fixtures
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

ESCAPE = py(
    f"""
import json
import boto3
from botocore.exceptions import ClientError

sts = boto3.client("sts")
print(json.dumps({{"arn": sts.get_caller_identity()["Arn"]}}))
try:
    credentials = sts.assume_role(RoleArn="{CHAINED_ARN}", RoleSessionName="escape")["Credentials"]
    print(json.dumps({{"minted": {{key: str(value) for key, value in credentials.items()}}}}))
except ClientError as error:
    print(json.dumps({{"error": error.response["Error"], "status": error.response["ResponseMetadata"]["HTTPStatusCode"]}}))
"""
)


@pytest.fixture
def chained(tmp_path: Path, chained_moto: IamStack) -> Iterator[AwsProxied]:
    yield from proxied_stack(tmp_path, chained_moto, revoke="deny-policy")


def _direct(service: str, stack: IamStack, minted: dict[str, str]) -> Any:
    """A client with ``minted`` keys straight to moto: not through any proxy, as from anywhere."""
    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=stack.moto.url,
        aws_access_key_id=minted["AccessKeyId"],
        aws_secret_access_key=minted["SecretAccessKey"],
        aws_session_token=minted["SessionToken"],
    )


def _real_key_id(proxied: AwsProxied) -> str:
    issued = next(r for r in proxied.env.log_records() if r["event"] == "credential.issued")
    key_id: str = issued["reference"]["access_key_id"]
    return key_id


def test_assume_role_from_the_sandbox_is_refused_and_mints_nothing(chained: AwsProxied) -> None:
    env, stack = chained.env, chained.stack
    result = chained.exec(chained.task(), ESCAPE)
    assert result.code == 0, result.stdout + result.stderr
    seen = lines_json(result)
    assert "/agent-s3/" in seen["arn"]  # the proxy still re-signs what the sandbox needs
    if "minted" in seen:  # the attack worked: show what the sandbox holds, after the session's revocation
        minted = seen["minted"]
        identity = _direct("sts", stack, minted).get_caller_identity()["Arn"]
        buckets = [b["Name"] for b in _direct("s3", stack, minted).list_buckets()["Buckets"]]
        pytest.fail(
            f"the sandbox minted real keys of {identity} through the proxy ({minted['AccessKeyId']}); after the"
            f" session's revocation they still list the buckets {buckets}, from outside any proxy"
        )
    error = seen["error"]
    assert (seen["status"], error["Code"]) == (403, "AccessDenied"), seen
    assert error["Message"].startswith("broker egress proxy: sts:AssumeRole answers with new credentials")
    assert "AccessKeyId" not in result.stdout and "SecretAccessKey" not in result.stdout
    # Refused before re-signing: moto received one request signed with the session's keys, the identity.
    real = _real_key_id(chained)
    assert [r["method"] for r in received(stack.moto) if r["key_id"] == real] == ["POST"]
    records = requests_of(env)
    assert [(r["decision"], r["upstream_status"]) for r in records] == [("allowed", 200), ("refused", None)]
    assert "sts:AssumeRole" in records[1]["reason"]
    [refused] = refusals_of(env)
    assert (refused["reason"], refused["count"], refused["destination"]) == ("action", 1, f"127.0.0.1:{chained.port}")


def test_the_session_policy_aws_holds_for_a_proxied_credential_denies_new_credentials(chained: AwsProxied) -> None:
    result = chained.exec(chained.task(), py('import boto3; print(boto3.client("sts").get_caller_identity()["Arn"])'))
    assert result.code == 0, result.stdout + result.stderr
    real = _real_key_id(chained)
    [held] = [session for session in sessions(chained.stack.moto) if session["key_id"] == real]
    assert held["policy"] is not None, "the broker passed no session policy for the proxied credential"
    policy = json.loads(held["policy"])
    denies = [s for s in policy["Statement"] if s["Effect"] == "Deny"]
    assert denies and {"sts:AssumeRole*", "sts:GetFederationToken", "sts:GetSessionToken"} <= set(denies[0]["Action"])
    evaluated = IAMPolicy(held["policy"])
    for action, resource in (
        ("sts:AssumeRole", CHAINED_ARN),
        ("sts:AssumeRoleWithWebIdentity", CHAINED_ARN),
        ("sts:GetSessionToken", "*"),
        ("sts:GetFederationToken", "*"),
        ("sts:GetWebIdentityToken", "*"),
    ):
        assert evaluated.is_action_permitted(action, resource) == PermissionResult.DENIED, action
    # Nothing else narrowed: the task asked for no session policy, so the role's own permissions stay the ceiling.
    for action, resource in (("s3:GetObject", f"arn:aws:s3:::{BUCKET}/x"), ("sts:GetCallerIdentity", "*")):
        assert evaluated.is_action_permitted(action, resource) == PermissionResult.PERMITTED, action
