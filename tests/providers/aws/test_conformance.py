"""The AWS STS provider keeps the provider contract against a moto server.

moto does not enforce IAM, so "gone" is asked of the role's deny policy: it
must hit the session by its real ``aws:userid`` (from GetCallerIdentity with
the minted keys) and its source identity.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from broker.vocab.secret import Secret
from devstack.aws import REGION, ROLE_ARN
from providers.aws.deny_policy.layout import POLICY_NAME
from providers.aws.provider import AwsStsProvider
from providers.base import MintedCredential
from tests.fixtures.aws import AwsRole
from tests.fixtures.aws_sts import deny_applies
from tests.providers.conformance import ProviderConformance, Subject, parse_request


def identity(role: AwsRole, credential: MintedCredential) -> dict[str, Any]:
    import boto3

    text = credential.files["credentials"]
    assert isinstance(text, Secret)
    keys = dict(line.split(" = ", 1) for line in text.reveal().splitlines()[1:])
    answer: dict[str, Any] = boto3.client(
        "sts",
        region_name=REGION,
        endpoint_url=role.endpoint_url,
        aws_access_key_id=keys["aws_access_key_id"],
        aws_secret_access_key=keys["aws_secret_access_key"],
        aws_session_token=keys["aws_session_token"],
    ).get_caller_identity()
    return answer


def denied(provider: AwsStsProvider, role: AwsRole, credential: MintedCredential) -> bool:
    iam = provider.clients.client("iam")
    try:
        document = iam.get_role_policy(RoleName=role.name, PolicyName=POLICY_NAME)["PolicyDocument"]
    except iam.exceptions.NoSuchEntityException:
        return False
    session = {"aws:userid": identity(role, credential)["UserId"]}
    source = credential.reference.get("source_identity")
    return deny_applies(document, session | ({"aws:SourceIdentity": source} if source else {}))


class TestAwsConformance(ProviderConformance):
    @pytest.fixture
    def subject(self, aws_provider: AwsStsProvider, aws_role: AwsRole) -> Iterator[Subject]:
        request = parse_request(AwsStsProvider, {"role_arn": ROLE_ARN})
        yield Subject(
            aws_provider,
            request,
            works=lambda c: (
                identity(aws_role, c)["UserId"].startswith(f"{aws_role.role_id}:")
                and not denied(aws_provider, aws_role, c)
            ),
            gone=lambda c: denied(aws_provider, aws_role, c),
        )
