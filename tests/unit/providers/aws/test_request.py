"""The ``aws_sts`` provider's manifest requests, without a server: the registry and its laziness, the config
table, and parsing and refusing a request and its session policy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from broker.vocab.errors import ManifestError
from broker.vocab.fields import Fields
from providers.aws.provider import AwsStsProvider
from providers.aws.request import AwsStsRequest
from providers.registry import provider_class
from tests.fixtures.aws import ACCOUNT, REGION, ROLE_ARN
from tests.fixtures.aws_sts import S3_READ, parse, policy, statement

# -- registry and laziness ---------------------------------------------------------------


def test_registered_and_boto3_imported_lazily() -> None:
    assert provider_class("aws_sts") is AwsStsProvider
    code = (
        "import sys, providers.registry as r; r.provider_class('aws_sts');"
        "assert 'boto3' not in sys.modules and 'botocore' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[4])


def test_from_config() -> None:
    from broker.vocab.errors import ConfigError

    fields = Fields({"type": "aws_sts", "region": "eu-west-1", "revoke": "expire"}, "providers.aws", ConfigError)
    fields.raw("type")
    provider = AwsStsProvider.from_config("aws", fields, Path("/etc/broker"))
    fields.done()
    assert isinstance(provider, AwsStsProvider)
    assert (provider.clients.region, provider.revoke_mode, provider.clients.endpoint_url) == (
        "eu-west-1",
        "expire",
        None,
    )
    for bad, field in (
        ({"region": "us east"}, "providers.aws.region"),
        ({"region": "us-east-1", "revoke": "never"}, "providers.aws.revoke"),
        ({"region": "us-east-1", "endpoint_url": "ftp://x\n"}, "providers.aws.endpoint_url"),
        ({"region": "us-east-1", "profile": "a b"}, "providers.aws.profile"),
    ):
        with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
            AwsStsProvider.from_config("aws", Fields(bad, "providers.aws", ConfigError), Path("/"))


# -- manifest requests -------------------------------------------------------------------


def test_parse_valid_request() -> None:
    request = parse(
        {
            "role_arn": "arn:aws:iam::123456789012:role/ci/agent-ci",
            "session_policy": S3_READ,
            "policy_arns": ["arn:aws:iam::123456789012:policy/ci-extra"],
        },
        ttl=900,
    )
    assert request.role_name == "agent-ci"
    assert request.policy_json == (
        '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:GetObject"],'
        '"Resource":["arn:aws:s3:::ci-artifacts/*"]}]}'
    )
    assert request.scope() == {
        "role_arn": "arn:aws:iam::123456789012:role/ci/agent-ci",
        "session_policy": S3_READ,
        "policy_arns": ["arn:aws:iam::123456789012:policy/ci-extra"],
    }
    hash(request)  # a frozen value


def test_parse_normalises_single_statement_and_strings() -> None:
    body: dict[str, Any] = {
        "Version": "2008-10-17",
        "Statement": {
            "Sid": "Read1",
            "Effect": "Allow",
            "Action": "s3:Get*",
            "Resource": "*",
            "Condition": {"StringLike": {"s3:prefix": ["ci/*"]}, "Bool": {"aws:SecureTransport": True}},
        },
    }
    request = parse({"role_arn": ROLE_ARN, "session_policy": body})
    assert request.session_policy is not None
    (only,) = request.session_policy.statements
    assert (only.sid, only.actions, only.resources) == ("Read1", ("s3:Get*",), ("*",))
    assert json.loads(request.policy_json)["Statement"][0]["Condition"] == body["Statement"]["Condition"]
    assert parse({"role_arn": ROLE_ARN}).session_policy is None


def _big_policy() -> dict[str, Any]:
    resources = [f"arn:aws:s3:::bucket-{i:04d}/*" for i in range(90)]
    return policy(statement(Resource=resources))


BAD_REQUESTS: list[tuple[dict[str, Any], int | None, str]] = [
    ({"role_arn": "arn:aws:iam::12345:role/x"}, None, r"credentials\[0\]\.role_arn"),
    ({"role_arn": "arn:aws:iam::123456789012:user/x"}, None, r"credentials\[0\]\.role_arn"),
    ({"role_arn": "arn:aws:iam::123456789012:role/" + "r" * 65}, None, r"credentials\[0\]\.role_arn"),
    ({"role_arn": "arn:aws:iam::123456789012:role/a b"}, None, r"credentials\[0\]\.role_arn"),
    ({}, None, r"credentials\[0\]\.role_arn: required"),
    ({"role_arn": ROLE_ARN}, 600, r"credentials\[0\]\.ttl: 10m is below the AWS minimum of 15m"),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(NotAction=5))},
        None,
        r"session_policy\.Statement\[0\]\.NotAction: expected a string or a list of strings",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(), statement(Principal="*"))},
        None,
        r"session_policy\.Statement\[1\]\.Principal",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(NotPrincipal={"AWS": "*"}))},
        None,
        r"session_policy\.Statement\[0\]\.NotPrincipal",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Effect="Maybe"))},
        None,
        r"Statement\[0\]\.Effect: must be Allow or Deny",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": {"Version": "2012-10-17", "Statement": "Allow everything"}},
        None,
        r"session_policy\.Statement: expected a list of statements",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": {"Version": "2012-10-17", "Statement": ["s3:*"]}},
        None,
        r"session_policy\.Statement\[0\]: expected a mapping",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": {"Version": "2012-10-17", "Statement": []}},
        None,
        r"session_policy\.Statement: needs at least 1 item",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(*[statement()] * 101)},
        None,
        r"session_policy\.Statement: has more than 100 items",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": _big_policy()},
        None,
        r"credentials\[0\]\.session_policy: is \d+ characters .* AWS allows 2048",
    ),
    (
        {"role_arn": ROLE_ARN, "policy_arns": [f"arn:aws:iam::{ACCOUNT}:policy/p{i}" for i in range(11)]},
        None,
        r"credentials\[0\]\.policy_arns: has more than 10 items",
    ),
    (
        {"role_arn": ROLE_ARN, "policy_arns": ["arn:aws:iam::999999999999:policy/p"]},
        None,
        r"policy_arns\[0\]: must be in the same partition and account",
    ),
    (
        {"role_arn": ROLE_ARN, "policy_arns": ["arn:aws:s3:::bucket"]},
        None,
        r"policy_arns\[0\]",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": {"Version": "2020-01-01", "Statement": [statement()]}},
        None,
        r"session_policy\.Version: must be one of",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": {"Version": datetime(2012, 10, 17).date(), "Statement": []}},
        None,
        r"session_policy\.Version: expected the string",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Action=42))},
        None,
        r"Statement\[0\]\.Action: expected a string or a list",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Action=["s3:GetObject", "s3 Get"]))},
        None,
        r"Statement\[0\]\.Action\[1\]",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy({"Effect": "Allow", "Action": "s3:GetObject"})},
        None,
        r"Statement\[0\]\.Resource: required",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Resource="bucket/*"))},
        None,
        r"Statement\[0\]\.Resource",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Extra=1))},
        None,
        r"Statement\[0\]\.Extra: unknown key",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Sid="A"), statement(Sid="A"))},
        None,
        r"session_policy\.Statement: Sid 'A' is used twice",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Condition={"Str ingEquals": {"a:b": "c"}}))},
        None,
        r"Statement\[0\]\.Condition\.Str ingEquals: is not a condition operator",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Condition={"StringEquals": {"a:b": {}}}))},
        None,
        r"Condition\.StringEquals\.a:b: expected a string, number or boolean",
    ),
    ({"role_arn": ROLE_ARN, "session_policy": ["not", "a", "mapping"]}, None, r"session_policy: expected a mapping"),
    ({"role_arn": ROLE_ARN, "tags": {"broker:session": "x"}}, None, r"credentials\[0\]\.tags: unknown key"),
]


@pytest.mark.parametrize(("body", "ttl", "message"), BAD_REQUESTS)
def test_parse_refuses_bad_requests(body: dict[str, Any], ttl: int | None, message: str) -> None:
    with pytest.raises(ManifestError, match=message) as caught:
        parse(body, ttl=ttl)
    assert caught.value.exit_code == 2
    assert "\n" not in caught.value.message


def test_manifest_and_config_wire_the_provider(tmp_path: Path) -> None:
    """The SPEC example's AWS credential through the real config and manifest loaders."""
    from broker.core.inputs.config import parse_config
    from broker.core.inputs.manifest import parse_manifest

    config = parse_config({"providers": {"aws": {"type": "aws_sts", "region": REGION}}}, tmp_path / "b.toml")
    manifest = parse_manifest(
        b"""
version: 1
task: fix-build-123
ttl: 30m
credentials:
  - name: artifacts
    provider: aws
    role_arn: arn:aws:iam::123456789012:role/agent-ci
    ttl: 15m
    session_policy:
      Version: "2012-10-17"
      Statement:
        - {Effect: Allow, Action: ["s3:GetObject"], Resource: ["arn:aws:s3:::ci-artifacts/*"]}
""",
        config,
    )
    (request,) = manifest.credentials
    assert isinstance(request, AwsStsRequest) and request.ttl == 900
    assert request.scope()["session_policy"] == S3_READ
