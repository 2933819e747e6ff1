"""How the AWS provider talks to AWS and serialises its writers: client settings and the per-role host lock.

Kept apart from the provider so its mint and revoke read as the calls they
make; the provider builds one botocore client per service from these settings.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from providers.warm import botocore_pool, open_connections

if TYPE_CHECKING:
    from providers.aws.provider import AwsStsProvider


def client_config(timeout: float) -> Any:
    """botocore settings for every client: bounded connect/read time, standard retries (3 attempts)."""
    from botocore.config import Config

    return Config(connect_timeout=timeout, read_timeout=timeout, retries={"mode": "standard", "max_attempts": 3})


def host_lock(lock_dir: Path, endpoint_url: str | None, role_name: str) -> Any:
    """The file lock that serialises this host's brokers writing one role's deny policy."""
    from filelock import FileLock

    digest = hashlib.sha256(f"{endpoint_url or ''}|{role_name}".encode()).hexdigest()[:24]
    return FileLock(str(lock_dir / f"aws-role-{digest}.lock"), timeout=60, thread_local=False)


def aware(moment: datetime) -> datetime:
    """``moment`` as UTC when it carries no zone (the store's and the tests' clocks may be naive)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def warm_clients(provider: AwsStsProvider, minting: bool) -> None:
    """The IAM client with three connections (a reservation's or a revocation's three reads go at once) and,
    when minting, the STS client with one; each published only once connected, so no call opens another."""
    wanted = [("iam", 3)] if provider.revoke_mode == "deny-policy" else []
    for service, count in wanted + ([("sts", 1)] if minting else []):
        with provider._lock:
            if service not in provider._clients:
                client = provider._make_client(service)
                open_connections(botocore_pool(client), count)
                provider._clients[service] = client
