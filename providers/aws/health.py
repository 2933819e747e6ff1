"""``broker doctor``'s checks of an AWS provider: the broker's own identity and the clock."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from broker.vocab.errors import BrokerError
from providers.aws.errors import AwsErrors
from providers.base import FIX_MARK, HealthCheck, clock_check

if TYPE_CHECKING:
    from providers.aws.provider import AwsStsProvider


def health_checks(provider: AwsStsProvider) -> list[HealthCheck]:
    """``GetCallerIdentity`` with the broker's own identity, and the clock; mints nothing."""
    try:
        with AwsErrors(provider, "GetCallerIdentity"):
            identity = provider.client("sts").get_caller_identity()
            received = time.time()
    except BrokerError as exc:
        fix = (
            f"{FIX_MARK}check the broker's AWS identity and [providers.{provider.name}] (region, endpoint_url, profile)"
        )
        return [("identity", False, exc.message + fix)]
    who = f"the broker is {identity.get('Arn', '?')} (account {identity.get('Account', '?')})"
    results: list[HealthCheck] = [("identity", True, who)]
    headers = (identity.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
    clock = clock_check(headers.get("date"), received, f"aws {provider.endpoint_url or 'STS'}")
    return results + ([clock] if clock else [])
