"""Which hosts count as loopback: the one test that lets a provider URL use plain http."""

from __future__ import annotations

from ipaddress import ip_address

LOOPBACK_NAMES = frozenset({"localhost"})


def is_loopback_host(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ::1 (``host`` as ``urlsplit().hostname`` gives it)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False
