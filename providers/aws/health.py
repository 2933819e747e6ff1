"""``broker doctor``'s checks of an AWS provider: the broker's own identity and the clock."""

from __future__ import annotations

import time

from broker.vocab.checks import Check
from broker.vocab.errors import BrokerError
from providers.aws.clients import AwsClients
from providers.clock import clock_check


def health_checks(clients: AwsClients) -> list[Check]:
    """``GetCallerIdentity`` with the broker's own identity, and the clock; mints nothing."""
    try:
        with clients.errors("GetCallerIdentity"):
            identity = clients.client("sts").get_caller_identity()
            received = time.time()
    except BrokerError as exc:
        fix = f"check the broker's AWS identity and [providers.{clients.name}] (region, endpoint_url, profile)"
        return [Check("identity", False, exc.message, fix)]
    who = f"the broker is {identity.get('Arn', '?')} (account {identity.get('Account', '?')})"
    results = [Check("identity", True, who)]
    headers = (identity.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
    clock = clock_check(headers.get("date"), received, f"aws {clients.endpoint_url or 'STS'}")
    return results + ([clock] if clock else [])
