"""A running session's allow-list at connect time: where its proxy may connect now, and what it refused.

Every connection the proxy opens goes through the ``Gate``: a plain tunnel's, a plain-HTTP request's and each
upstream connection of a terminated tunnel. It resolves names itself and connects to an address it vetted, so a
name that resolves to a loopback, link-local or private address is refused unless that address is itself listed.
``broker session allow`` and ``disallow`` change the list of a running session (``change_allow``): a connection
opened after the change is decided on the new one.

The gate also keeps the session's tally: each refused destination (a denial, ``egress.denied``) and each kind of
refused request to a terminated host (``RefusedRequest``, ``egress.refused``) with how often, bounded (past
``max_denied_destinations`` distinct entries an ``(other destinations)`` entry keeps counting, so nothing refused
goes uncounted). The listener and the terminated path both count here; the session's end writes the records
(``broker.egress.proxy.denials``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence

from broker.egress.destinations import Destination, IPAddress, allowed
from broker.egress.exchange.limits import ProxyLimits
from broker.egress.exchange.refusals import Refusal, Refused, RefusedRequest

OTHER_DESTINATIONS = "(other destinations)"

#: (host, port) -> addresses; the system resolver unless a test passes a fixed table.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


async def system_resolver(host: str, port: int) -> Sequence[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class Gate:
    """One session's allow-list at connect time: ``allows`` decides; ``denials`` and ``refusals`` count."""

    def __init__(self, allow: tuple[Destination, ...], limits: ProxyLimits, resolver: Resolver | None = None) -> None:
        self.allow = allow
        self.limits = limits
        self.resolver = resolver or system_resolver
        self.denials: dict[str, int] = {}
        self.refusals: dict[RefusedRequest, int] = {}
        self.disallowed: tuple[Destination, ...] = ()  # taken away while the session runs (``change_allow``)
        self._listed = {(e.address, e.port) for e in allow if e.address is not None}
        #: Told each decision (allowed, denied, refused): the daemon's metrics count them; nothing by default.
        self.decided: Callable[[str], None] = _uncounted

    def change_allow(self, destination: Destination, *, allow: bool) -> None:
        """``broker session allow|disallow``: every connection opened from now on is decided on the new list
        (each list is replaced whole, so the proxy's loop reads the old one or the new one, never half)."""
        if allow:
            self.disallowed = tuple(d for d in self.disallowed if d != destination)
            if destination not in self.allow:
                self.allow = (*self.allow, destination)
            if destination.address is not None:
                self._listed = self._listed | {(destination.address, destination.port)}
        else:
            self.allow = tuple(d for d in self.allow if d != destination)
            self.disallowed = (*self.disallowed, destination)
            self._listed = {(e.address, e.port) for e in self.allow if e.address is not None}

    def allows(self, host: str, port: int) -> bool:
        """Whether ``host``:``port`` (canonical) is allowed: listed, and not disallowed since."""
        return allowed(self.allow, host, port) and not allowed(self.disallowed, host, port)

    def deny(self, host: str, port: int) -> Refused:
        """Count a destination that is not allowed; the 403 that refuses it."""
        destination = destination_text(host, port)
        if destination not in self.denials and len(self.denials) >= self.limits.max_denied_destinations:
            destination = OTHER_DESTINATIONS
        self.denials[destination] = self.denials.get(destination, 0) + 1
        self.decided("denied")
        return Refused(403, f"egress to {destination} is not allowed for this session")

    def count_refusal(self, host: str, port: int, reason: Refusal) -> None:
        """Count a refused request to a terminated host (its ``egress.refused`` record)."""
        key = RefusedRequest(destination_text(host, port), reason)
        if key not in self.refusals and len(self.refusals) >= self.limits.max_denied_destinations:
            key = RefusedRequest(OTHER_DESTINATIONS, reason)
        self.refusals[key] = self.refusals.get(key, 0) + 1
        self.decided("refused")

    async def vetted_addresses(self, host: str, port: int) -> list[IPAddress]:
        """The addresses the proxy may connect to for ``host``:``port``; ``Refused`` (403) when none."""
        if not self.allows(host, port):
            raise self.deny(host, port)
        literal = _address(host)
        if literal is not None:
            self.decided("allowed")
            return [literal]
        try:
            answers = await asyncio.wait_for(self.resolver(host, port), self.limits.connect_timeout)
        except (OSError, TimeoutError, UnicodeError):
            raise Refused(502, f"{printable(host)} could not be resolved") from None
        vetted: list[IPAddress] = []
        for text in answers:
            address = _address(text)
            if address is None or address in vetted:
                continue
            if (address.is_global and not address.is_multicast) or (address, port) in self._listed:
                vetted.append(address)
        if not vetted:
            raise self.deny(host, port)  # only loopback, link-local or private answers, none listed
        self.decided("allowed")
        return vetted

    async def open_upstream(
        self, host: str, port: int, tls: ssl.SSLContext | None = None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to a vetted address of ``host``:``port`` (TLS verified for ``host`` when ``tls``)."""
        last: Exception | None = None
        for address in await self.vetted_addresses(host, port):
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(
                        str(address), port, limit=self.limits.chunk, ssl=tls, server_hostname=host if tls else None
                    ),
                    self.limits.connect_timeout,
                )
            except (OSError, TimeoutError) as exc:
                last = exc
        raise Refused(502, f"{printable(host)}:{port} could not be reached ({type(last).__name__})")


def printable(text: str, limit: int = 300) -> str:
    """``text`` for a message: printable ASCII only (anything else as ``?``), at most ``limit`` characters."""
    cleaned = "".join(c if c.isascii() and c.isprintable() else "?" for c in text)
    return cleaned[:limit]


def destination_text(host: str, port: int) -> str:
    """``HOST:PORT`` (``[v6]:PORT``) as the records and messages name a destination."""
    return printable(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")


def _address(text: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _uncounted(decision: str) -> None:
    return None
