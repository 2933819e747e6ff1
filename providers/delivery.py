"""A secret that goes only through the egress proxy, to hosts and in a header the request itself names.

Most ``inject: proxy`` credentials go where their provider's configuration
says (``proxy_hosts``: GitHub's API, Vault's address). A ``kind: secret``
credential names its own: the hosts of the service it is for, the header
that service reads, and the variable of the command's environment that
holds its placeholder. The core checks the hosts against the manifest's
network and makes the proxy's header template from the rest.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProxyDelivery:
    """The hosts (``HOST:PORT``) the secret goes to, the header it goes in (``"x-api-key: {}"``; ``{}`` is the
    secret) and the variable holding its placeholder in the command's environment, if any."""

    hosts: tuple[str, ...]
    header: str
    env: str | None = None
