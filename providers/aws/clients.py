"""The AWS provider's clients of the broker's own identity: one botocore session, one client per service.

Kept apart from the provider so its mint and revoke read as the calls they
make. ``AwsClients`` builds each service's client once from one botocore
session (a session per client cost 70-130 ms and ~8 MiB), opens kept-alive
connections early (``warm``), and names the instance in error messages
(``errors``: ``providers.aws.errors``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from providers.aws.errors import AwsErrors
from providers.aws.web_identity import WebIdentity, broker_credentials, unsigned_creator
from providers.warm import botocore_pool, open_connections

if TYPE_CHECKING:
    from broker.vocab.secret import Secret


def client_config(timeout: float) -> Any:
    """botocore settings for every client: bounded connect/read time, standard retries (3 attempts)."""
    from botocore.config import Config

    return Config(connect_timeout=timeout, read_timeout=timeout, retries={"mode": "standard", "max_attempts": 3})


class AwsClients:
    """The clients of one provider instance (``name``) at one endpoint, created on first use."""

    def __init__(
        self,
        name: str,
        *,
        region: str,
        endpoint_url: str | None = None,
        profile: str | None = None,
        timeout: int = 10,
        web_identity: WebIdentity | None = None,
    ) -> None:
        self.name = name
        #: ``web_identity = true``: sessions assumed with the issuer's tokens; the broker's own keys, if any, are
        #: its role's (``providers.aws.web_identity``), never found on the host.
        self.web_identity = web_identity
        self.region = region
        self.endpoint_url = endpoint_url
        self.profile = profile
        self.timeout = timeout
        self._clients: dict[str, Any] = {}
        self._session: Any = None
        self._lock = threading.RLock()

    def client(self, service: str) -> Any:
        """A client of the broker's own identity (created once per service, under the lock; found without it)."""
        found = self._clients.get(service)
        if found is not None:
            return found
        with self._lock:
            if service not in self._clients:
                self._clients[service] = self._make(service)
            return self._clients[service]

    def _make(self, service: str) -> Any:
        """A client from the one botocore session; sessions are not thread-safe, hence the lock."""
        config = client_config(self.timeout)
        with self._lock, self.errors("client setup"):
            if self._session is None:
                import botocore.session

                self._session = botocore.session.Session(profile=self.profile)
                if self.web_identity is not None:
                    creator = unsigned_creator(self.region, self.endpoint_url)
                    broker_credentials(self._session, self.web_identity, self.name, creator)
            return self._session.create_client(
                service, region_name=self.region, endpoint_url=self.endpoint_url, config=config
            )

    def warm(self, wanted: Sequence[tuple[str, int]]) -> None:
        """Each ``(service, count)``'s client with ``count`` connections open, published only once connected, so
        no call opens another."""
        for service, count in wanted:
            with self._lock:
                if service not in self._clients:
                    client = self._make(service)
                    open_connections(botocore_pool(client), count)
                    self._clients[service] = client

    def services(self) -> list[str]:
        """The services whose clients exist so far."""
        with self._lock:
            return sorted(self._clients)

    def errors(self, action: str, *, missing_ok: bool = False, secrets: tuple[Secret, ...] = ()) -> AwsErrors:
        """Around one call: botocore's exceptions come out as broker errors naming this instance and ``action``."""
        return AwsErrors(self, action, missing_ok=missing_ok, secrets=secrets)

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
