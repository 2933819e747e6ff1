"""The fixture the ``aws_sts`` provider's tests against moto share: a credential minted on the stack's role."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from providers.aws.provider import AwsStsProvider
from providers.base import MintedCredential
from tests.fixtures.aws import ROLE_ARN
from tests.fixtures.aws_sts import S3_READ, context, parse


@pytest.fixture
def minted(aws_provider: AwsStsProvider) -> Iterator[tuple[AwsStsProvider, MintedCredential]]:
    request = parse({"role_arn": ROLE_ARN, "session_policy": S3_READ})
    yield aws_provider, aws_provider.mint(request, context())
