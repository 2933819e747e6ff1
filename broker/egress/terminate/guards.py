"""What a request inside an intercepted tunnel must be, and what an answer from a guarded host may not hold.

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
the canonical authority as its ``Host``.

Likewise the request runs the method and the path of its request line, which
the operations decision, the credential's injector and the ``egress.request``
record are all about: a header some frameworks and fronts take another
method from (``X-HTTP-Method-Override``, ``X-HTTP-Method``,
``X-Method-Override``: Express's method-override, ASP.NET, Google's APIs) or
another path (``X-Original-URL``, ``X-Rewrite-URL``, ``X-Override-URL``: IIS,
Symfony-style front controllers) is refused on every terminated host, with
operations or a credential alone. Header names are compared case-insensitively
and with ``_`` as ``-`` (a CGI-style gateway reads ``X_HTTP_Method_Override``
as ``X-HTTP-Method-Override``). Anything else is refused with 400 before a
connection upstream is opened.

A provider can hand out, on request, an answer that carries the secret
elsewhere: Vault wraps any answer in a single-use wrapping token when asked
(``X-Vault-Wrap-TTL``), whose token unwraps anywhere, outside the sandbox
too, to what was wrapped (``auth/token/lookup-self`` wrapped is the
session's real token). Its provider type says what to keep from its hosts
(``ProxyFacts``; here an ``AnswerGuard``, which the token's injection carries:
``broker.egress.injectors.swap``): the request headers that ask for
such an answer, taken out of each request (names compared
case-insensitively, ``_`` as ``-``), and the top-level key of a JSON answer
that holds one (Vault: ``wrap_info``), refused when an answer has it anyway
(``sys/wrapping/wrap``, a rewrap, a server that wraps on its own). To look
at the whole answer the proxy holds a JSON answer back until its end, at
most ``limit`` bytes (a longer one is refused: it cannot be checked); an
answer of another declared type (a PEM chain, a CRL, metrics) streams
through unheld.

Each refusal names a ``Refusal`` kind (``broker.egress.exchange.refusals``),
which the session's ``Gate`` counts for its ``egress.refused`` records.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence

import h11

from broker.egress.destinations import DestinationError, canonical_host, parse_port
from broker.egress.exchange.refusals import Refusal, Refused
from broker.egress.injectors.swap import AnswerGuard

Header = tuple[bytes, bytes]
HTTPS_PORT = 443
#: Headers a front may route by, or rebuild the host from, instead of ``Host``.
ROUTING_HEADERS = frozenset(
    {b"forwarded", b"x-forwarded-host", b"x-forwarded-server", b"x-host", b"x-original-host", b"x-http-host-override"}
)
#: Headers a framework or front may take another method or path from than the request line's.
OVERRIDE_HEADERS = frozenset(
    {
        b"x-http-method-override",
        b"x-http-method",
        b"x-method-override",
        b"x-original-url",
        b"x-rewrite-url",
        b"x-override-url",
    }
)
_JSON_TYPES = frozenset({b"", b"application/json", b"text/json"})


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


def checked_headers(target: bytes, headers: Sequence[Header], host: str, port: int) -> list[Header]:
    """The headers of a request inside the tunnel to ``host``:``port`` (``target``: its request line's, ``headers``:
    names in lower case, as h11 gives them), its one ``Host`` in canonical form.

    ``Refused`` (400) when the target is not origin-form, when there is not exactly one ``Host`` naming this
    authority, when a header names a host for a front to route by, or another method or path to run.
    """
    authority = tunnel_authority(host, port)
    if not target.startswith(b"/"):
        raise Refused(400, "a request inside the tunnel names a path (/...), not a URL", Refusal.TARGET)
    named: list[bytes] = []
    kept: list[Header] = [(b"host", authority)]
    routing: list[bytes] = []
    override: list[bytes] = []
    for name, value in headers:  # one pass over the head: its Host, and any routing or override header
        if name == b"host":
            named.append(value)
            continue
        kept.append((name, value))
        spelled = name.lower().replace(b"_", b"-")
        if spelled in ROUTING_HEADERS:
            routing.append(name)
        elif spelled in OVERRIDE_HEADERS:
            override.append(name)
    if len(named) != 1 or parse_host_header(named[0]) != (host, port):
        raise Refused(
            400,
            f"a request inside this tunnel carries exactly one Host header, {authority.decode()}",
            Refusal.HOST,
        )
    if routing:
        raise Refused(400, f"a request inside the tunnel names no other host ({_first(routing)})", Refusal.HOST)
    if override:
        raise Refused(
            400,
            f"a request runs the method and path of its request line: {_first(override)} is refused",
            Refusal.OVERRIDE,
        )
    return kept


def _first(names: list[bytes]) -> str:
    """The first of ``names`` in sorted order, as the request wrote it."""
    return min(names).decode("ascii", "replace")


def held_back(headers: Sequence[Header]) -> bool:
    """Whether a guarded answer with these headers is held and checked: JSON, or no declared type."""
    declared = [value for name, value in headers if name == b"content-type"]
    media = declared[0].partition(b";")[0].strip().lower() if declared else b""
    return len(declared) > 1 or media in _JSON_TYPES or media.endswith(b"+json")


def holds_key(body: bytes, key: str) -> bool:
    """Whether an answer's JSON object has a top-level ``key`` that is not null (any of its keys).

    A body that does not parse counts as holding it when ``"key"`` appears in it at all.
    """
    try:
        parsed = json.loads(body, object_pairs_hook=list)  # an object: its (key, value) pairs, duplicates kept
    except (ValueError, RecursionError):
        return json.dumps(key).encode() in body
    if not isinstance(parsed, list):
        return False
    return any(isinstance(pair, tuple) and pair[0] == key and pair[1] is not None for pair in parsed)


class HeldAnswer:
    """A guarded answer held back (at most ``limit`` bytes of body) until its end shows no refused key."""

    def __init__(self, response: h11.Response, limit: int, guard: AnswerGuard) -> None:
        assert guard.refused_key is not None
        self.response = response
        self.limit = limit
        self.guard = guard
        self.key = guard.refused_key
        self.body = bytearray()

    def add(self, data: bytes) -> None:
        if len(self.body) + len(data) > self.limit:
            raise Refused(
                502,
                f"a {self.guard.label} answer longer than {self.limit} bytes cannot be checked for a"
                f" {self.guard.refused_name}",
                Refusal.UNCHECKED,
            )
        self.body += data

    def check(self) -> bytes:
        """The whole body, or ``Refused`` (502) when it holds the refused key (never passed on)."""
        if holds_key(bytes(self.body), self.key):
            raise Refused(
                502,
                f"the answer holds a {self.guard.label} {self.guard.refused_name}, which the proxy does not pass on",
                Refusal.WRAPPED,
            )
        return bytes(self.body)
