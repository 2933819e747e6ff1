"""Network destinations (``HOST:PORT``, ``*.suffix:PORT``, ``IP:PORT``, ``[v6]:PORT``): strict parsing and matching.

Manifests and policy rules are written by different people and read by a
matcher that must not be fooled, so only one spelling of each destination
is accepted: lower-case ASCII names (an international name in its ``xn--``
form), no trailing dot, no single-label names (they would be resolved
through the search domains), IP literals in their canonical form, IPv6 in
brackets, a decimal port 1-65535 without leading zeros, and nothing else
(no scheme, user, path, zone id or whitespace). A wildcard is ``*.`` plus a
suffix of at least two labels and matches names with one or more labels
in front of that suffix, never the suffix itself.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

MAX_TEXT = 262  # 253 characters of name, ':' and a port
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_PORT = re.compile(r"[1-9][0-9]{0,4}")
_IPV4_LIKE = re.compile(r"[0-9.]+|.*\.[0-9]+|0x.*", re.IGNORECASE)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class DestinationError(ValueError):
    """A destination that is not in the one accepted spelling; the message says why (no input echoed)."""


@dataclass(frozen=True, order=True)
class Destination:
    """One allowed destination; ``host`` is the name, the suffix after ``*.``, or the address text."""

    host: str
    port: int
    wildcard: bool = False
    address: IPAddress | None = None

    def __str__(self) -> str:
        if isinstance(self.address, ipaddress.IPv6Address):
            return f"[{self.address}]:{self.port}"
        return f"{'*.' if self.wildcard else ''}{self.host}:{self.port}"

    def covers(self, other: Destination) -> bool:
        """Whether this entry (of a rule) covers ``other`` (an entry of a manifest)."""
        if self.port != other.port:
            return False
        if self.address is not None or other.address is not None:
            return self.address == other.address
        if not self.wildcard:
            return not other.wildcard and self.host == other.host
        return other.host.endswith("." + self.host) or (other.wildcard and other.host == self.host)

    def matches(self, host: str, port: int) -> bool:
        """Whether a request for ``host`` (canonical, see ``canonical_host``) and ``port`` falls under this entry."""
        if self.port != port:
            return False
        if self.address is not None:
            return str(self.address) == host
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host


def parse_port(text: str) -> int:
    if not _PORT.fullmatch(text) or not 1 <= int(text) <= 65535:
        raise DestinationError("the port must be a number from 1 to 65535, without leading zeros")
    return int(text)


def parse_address(text: str) -> IPAddress:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise DestinationError("not a valid IP address") from None
    if str(address) != text:
        raise DestinationError(f"write the address in its canonical form, {address}")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise DestinationError(f"write an IPv4-mapped address as IPv4, {address.ipv4_mapped}")
    return address


def check_name(name: str) -> None:
    """A DNS name in the one accepted spelling (see the module docstring)."""
    if not name.isascii():
        raise DestinationError("not ASCII; write an international name in its xn-- (punycode) form")
    if name != name.lower():
        raise DestinationError("host names are written in lower case")
    if name.endswith("."):
        raise DestinationError("no trailing dot")
    if len(name) > 253:
        raise DestinationError("a host name has at most 253 characters")
    labels = name.split(".")
    if len(labels) < 2:
        raise DestinationError("a single-label name would be resolved through the search domains; give a full name")
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise DestinationError("not a host name (labels are a-z, 0-9 and '-', 1 to 63 characters)")
        if label.startswith("xn--"):
            try:
                label[4:].encode("ascii").decode("punycode")
            except UnicodeError:
                raise DestinationError("an xn-- label that is not valid punycode") from None
        elif label[2:4] == "--":
            raise DestinationError("labels with '--' in the third and fourth place are reserved")
    if _IPV4_LIKE.fullmatch(name):
        raise DestinationError("looks like an IPv4 address in a non-canonical form; write it as a.b.c.d")


def parse_destination(text: object) -> Destination:
    """One ``HOST:PORT`` entry, or ``DestinationError`` naming what is wrong with it."""
    if not isinstance(text, str):
        raise DestinationError("expected a string HOST:PORT")
    if len(text) > MAX_TEXT:
        raise DestinationError(f"longer than {MAX_TEXT} characters")
    for mark, what in (
        ("://", "a scheme"),
        ("@", "a user name"),
        ("/", "a path"),
        ("?", "a query"),
        ("#", "a fragment"),
    ):
        if mark in text:
            raise DestinationError(f"{what} is not allowed; write HOST:PORT")
    if not text.isprintable() or any(c.isspace() for c in text):
        raise DestinationError("spaces and control characters are not allowed")
    if text.startswith("["):
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise DestinationError("an IPv6 address is written [ADDRESS]:PORT")
        if "%" in inside:
            raise DestinationError("zone ids are not allowed")
        address = parse_address(inside)
        if not isinstance(address, ipaddress.IPv6Address):
            raise DestinationError("brackets are only for IPv6 addresses")
        return Destination(str(address), parse_port(rest[1:]), address=address)
    host, colon, port_text = text.rpartition(":")
    if not colon or not host:
        raise DestinationError("expected HOST:PORT")
    if ":" in host:
        raise DestinationError("an IPv6 address is written [ADDRESS]:PORT")
    port = parse_port(port_text)
    if host.startswith("*."):
        suffix = host[2:]
        if "." not in suffix:
            raise DestinationError("a wildcard suffix needs at least two labels (*.example.com, never *.com)")
        check_name(suffix)
        return Destination(suffix, port, wildcard=True)
    if "*" in host:
        raise DestinationError("a wildcard is '*.' followed by a suffix of at least two labels")
    if host[-1:].isdigit() and all(c.isdigit() or c == "." for c in host):
        return Destination(host, port, address=parse_address(host))
    check_name(host)
    return Destination(host, port)


def canonical_host(host: str) -> str:
    """A requested host as the proxy compares it: lower case, one trailing dot dropped, IPv6 unbracketed."""
    host = host.lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.endswith(".") and not host.endswith(".."):
        host = host[:-1]
    return host


def allowed(entries: tuple[Destination, ...], host: str, port: int) -> bool:
    """Whether a request for ``host`` (canonical) and ``port`` falls under one of ``entries``."""
    return any(entry.matches(host, port) for entry in entries)
