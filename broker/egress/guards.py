"""What a request inside an intercepted tunnel must be, and what an answer from a Vault host may not hold.

The proxy vets a credential host for one authority, the CONNECT's, and then
puts the real secret into the request inside the tunnel. A front that routes
by ``Host`` (an ingress, a shared reverse proxy, a server with several names)
would hand that request, secret and all, to whichever virtual host the
request names. So a request inside the tunnel names the tunnel's authority
and nothing else: exactly one ``Host``, equal to the CONNECT authority once
both are in canonical form (``canonical_host``: lower case, one trailing dot
dropped; an IPv6 literal as its address; the https port 443 elided), an
origin-form target (``/path``), and none of the headers fronts take another
host from (``Forwarded``, ``X-Forwarded-Host`` and the like). Upstream gets
the canonical authority as its ``Host``. Anything else is refused with 400
before a connection upstream is opened.

Vault wraps any answer in a single-use wrapping token when asked
(``X-Vault-Wrap-TTL``): the answer then holds only ``wrap_info``, whose
token unwraps anywhere, outside the sandbox too, to what was wrapped, and
``auth/token/lookup-self`` wrapped is the session's real token. So the
wrapping headers are taken out of each request to a Vault host (names
compared case-insensitively, ``_`` as ``-``), and an answer from one that
holds a top-level ``wrap_info`` anyway (``sys/wrapping/wrap``, a rewrap,
a server that wraps on its own) is refused. To look at the whole answer the
proxy holds a Vault JSON answer back until its end, at most ``limit`` bytes
(a longer one is refused: it cannot be checked). Vault writes every wrapped
answer as JSON, so an answer of another declared type (a PEM chain, a CRL,
metrics) streams through unheld.

Each refusal names a ``Refusal`` kind, which the proxy counts for the
session's ``egress.refused`` records (``broker.egress.records``).
"""

from __future__ import annotations

import enum
import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass

import h11

from broker.egress.destinations import DestinationError, canonical_host, parse_port
from broker.egress.exchange import Refused

Header = tuple[bytes, bytes]
HTTPS_PORT = 443
#: Headers a front may route by, or rebuild the host from, instead of ``Host``.
ROUTING_HEADERS = frozenset(
    {b"forwarded", b"x-forwarded-host", b"x-forwarded-server", b"x-host", b"x-original-host", b"x-http-host-override"}
)
WRAP_HEADERS = frozenset({b"x-vault-wrap-ttl", b"x-vault-wrap-format"})
_JSON_TYPES = frozenset({b"", b"application/json", b"text/json"})


class Refusal(enum.StrEnum):
    """Why a request to a credential host was refused (the ``reason`` of an ``egress.refused`` record)."""

    PLAIN_HTTP = "plain-http"  # a plain-HTTP request to a credential host: only https carries the secret
    HOST = "host"  # the request names another host than the tunnel's
    TARGET = "target"  # not an origin-form target
    MALFORMED = "malformed"  # not HTTP/1.1 that h11 accepts
    WRAPPED = "wrapped-answer"  # a Vault answer holding a wrapping token
    UNCHECKED = "unchecked-answer"  # a Vault JSON answer too long to be checked
    CREDENTIAL = "credential"  # a credential's injector refused it (an AWS signature that does not verify)


@dataclass(frozen=True, order=True)
class RefusedRequest:
    """One kind of refused request to a credential host: where it went and why (what the proxy counts)."""

    destination: str
    reason: Refusal


def tunnel_authority(host: str, port: int) -> bytes:
    """The ``Host`` value of ``host`` (canonical) and ``port`` inside a TLS tunnel: 443 elided, IPv6 bracketed."""
    name = f"[{host}]" if ":" in host else host
    return (name if port == HTTPS_PORT else f"{name}:{port}").encode("ascii")


def parse_host_header(value: bytes) -> tuple[str, int] | None:
    """``host[:port]`` or ``[v6][:port]`` in canonical form (port 443 when none); None when not one of those."""
    try:
        text = value.decode("ascii")
    except UnicodeDecodeError:
        return None
    if text.startswith("["):
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or "%" in inside:
            return None
        try:
            host = str(ipaddress.IPv6Address(inside))
        except ValueError:
            return None
    else:
        name, colon, port_text = text.partition(":")
        if ":" in port_text:
            return None
        host, rest = canonical_host(name), colon + port_text
    if not host:
        return None
    if not rest:
        return host, HTTPS_PORT
    if not rest.startswith(":"):
        return None
    try:
        return host, parse_port(rest[1:])
    except DestinationError:
        return None


def checked_headers(request: h11.Request, host: str, port: int) -> list[Header]:
    """The headers of a request inside the tunnel to ``host``:``port``, its one ``Host`` in canonical form.

    ``Refused`` (400) when the target is not origin-form, when there is not exactly one ``Host`` naming this
    authority, or when a header names a host for a front to route by.
    """
    authority = tunnel_authority(host, port)
    if not request.target.startswith(b"/"):
        raise Refused(400, "a request inside the tunnel names a path (/...), not a URL", Refusal.TARGET)
    named = [value for name, value in request.headers if name == b"host"]
    if len(named) != 1 or parse_host_header(named[0]) != (host, port):
        raise Refused(
            400,
            f"a request inside this tunnel carries exactly one Host header, {authority.decode()}",
            Refusal.HOST,
        )
    routing = sorted({name.decode() for name, _ in request.headers if name in ROUTING_HEADERS})
    if routing:
        raise Refused(400, f"a request inside the tunnel names no other host ({routing[0]})", Refusal.HOST)
    return [(b"host", authority), *((name, value) for name, value in request.headers if name != b"host")]


def without_wrapping(headers: Sequence[Header]) -> list[Header]:
    """``headers`` without Vault's response-wrapping requests."""
    return [(name, value) for name, value in headers if name.lower().replace(b"_", b"-") not in WRAP_HEADERS]


def held_back(headers: Sequence[Header]) -> bool:
    """Whether an answer from a Vault host with these headers is held and checked: JSON, or no declared type."""
    declared = [value for name, value in headers if name == b"content-type"]
    media = declared[0].partition(b";")[0].strip().lower() if declared else b""
    return len(declared) > 1 or media in _JSON_TYPES or media.endswith(b"+json")


def holds_wrap_info(body: bytes) -> bool:
    """Whether a Vault answer's JSON object has a top-level ``wrap_info`` that is not null (any of its keys).

    A body that does not parse counts as wrapped when ``"wrap_info"`` appears in it at all.
    """
    try:
        parsed = json.loads(body, object_pairs_hook=list)  # an object: its (key, value) pairs, duplicates kept
    except (ValueError, RecursionError):
        return b'"wrap_info"' in body
    if not isinstance(parsed, list):
        return False
    return any(isinstance(pair, tuple) and pair[0] == "wrap_info" and pair[1] is not None for pair in parsed)


class HeldAnswer:
    """An answer from a Vault host held back (at most ``limit`` bytes of body) until its end shows no wrap_info."""

    def __init__(self, response: h11.Response, limit: int) -> None:
        self.response = response
        self.limit = limit
        self.body = bytearray()

    def add(self, data: bytes) -> None:
        if len(self.body) + len(data) > self.limit:
            raise Refused(
                502,
                f"a Vault answer longer than {self.limit} bytes cannot be checked for a wrapping token",
                Refusal.UNCHECKED,
            )
        self.body += data

    def check(self) -> bytes:
        """The whole body, or ``Refused`` (502) when it holds a wrapping token (never passed on)."""
        if holds_wrap_info(bytes(self.body)):
            raise Refused(
                502, "the answer holds a Vault wrapping token, which the proxy does not pass on", Refusal.WRAPPED
            )
        return bytes(self.body)
