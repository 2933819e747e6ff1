"""``inject: proxy``: the sandbox holds a worthless placeholder, the proxy puts the real secret in on the way out.

A placeholder has the shape of the secret it stands for (its prefix, such
as ``ghs_`` or ``hvs.``, then random letters and digits to the same length),
so clients accept it unchanged. The proxy swaps it for the secret only in
requests to the credential's own hosts (which it reaches over verified TLS)
and only in ``Authorization`` (``Bearer``, ``token``, ``Basic`` with any
user name, the way git sends it) and the headers its provider names as
holding the token whole (``Injection.token_headers``). Anywhere else the
placeholder goes out as it is. An answer can carry the secret back (a token
lookup may show the token's id): in the body of every answer from
those hosts, asked for without compression, the secret becomes its
placeholder again (the same length, so the framing holds). Once the session is revoked, the proxy
refuses every request to those hosts at once, before the provider's own
revocation lands. What a request to those hosts must be (its own ``Host``;
nothing the credential's provider guards against, ``Injection.guard``) is
``broker.egress.guards``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets
import ssl
import string
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from broker.egress.ca import SessionCA
from broker.vocab.secret import Secret

if TYPE_CHECKING:  # the guards bring h11 and asyncio: the proxy's, not an issue's
    from broker.egress.guards import AnswerGuard

ALPHABET = string.ascii_letters + string.digits
PREFIX = re.compile(r"[A-Za-z]{1,12}[_.]")
Header = tuple[bytes, bytes]


def placeholder_for(secret: Secret) -> Secret:
    """A random value of ``secret``'s shape: the same prefix, then letters and digits to the same length."""
    value = secret.reveal()
    match = PREFIX.match(value)
    prefix = match.group(0) if match else ""
    while True:
        candidate = prefix + "".join(secrets.choice(ALPHABET) for _ in range(len(value) - len(prefix)))
        if not hmac.compare_digest(candidate, value):
            return Secret(candidate)


@dataclass(frozen=True)
class Injection:
    """One credential: its hosts (``host``, ``port``), the placeholder the sandbox holds, the secret it stands for."""

    hosts: frozenset[tuple[str, int]]
    placeholder: Secret
    secret: Secret
    upstream_ca_file: Path | None = None  # what the real hosts' certificates are checked against; None: the system's
    token_headers: frozenset[bytes] = frozenset()  # lower-case names of headers, beside Authorization, holding it whole
    guard: AnswerGuard | None = None  # what its provider keeps from its hosts (``broker.egress.guards``)


class Interceptor:
    """What the proxy needs to terminate TLS for the credential hosts and put the secrets in."""

    def __init__(self, ca: SessionCA) -> None:
        self.ca = ca
        self._injections: list[Injection] = []
        self._revoked = threading.Event()
        self._upstream: dict[Path | None, ssl.SSLContext] = {}

    def add(self, injection: Injection) -> None:
        if any(host not in self.ca.hosts for host, _ in injection.hosts):
            raise ValueError("an injection host outside the session CA")
        self._injections.append(injection)

    def intercepts(self, host: str, port: int) -> bool:
        return any((host, port) in injection.hosts for injection in self._injections)

    def answer_guard(self, host: str, port: int) -> AnswerGuard | None:
        """What the provider of the credential of ``host``:``port`` keeps from it (None: nothing)."""
        return next((i.guard for i in self._injections if (host, port) in i.hosts and i.guard is not None), None)

    def credential_ports(self, host: str) -> list[int]:
        """The ports ``host`` (canonical) is a credential host on, whichever port it is asked for on."""
        return sorted({p for injection in self._injections for h, p in injection.hosts if h == host})

    def revoke(self) -> None:
        """From now on every request to a credential host is refused, and the secrets are dropped."""
        self._revoked.set()
        self._injections = [replace(i, secret=Secret(b"")) for i in self._injections]

    @property
    def revoked(self) -> bool:
        return self._revoked.is_set()

    def upstream_context(self, host: str, port: int) -> ssl.SSLContext:
        """TLS to the real host, verified against its credential's ``upstream_ca_file`` or the system's CAs."""
        ca_file = next((i.upstream_ca_file for i in self._injections if (host, port) in i.hosts), None)
        context = self._upstream.get(ca_file)
        if context is None:
            cafile = str(ca_file) if ca_file is not None else None
            context = self._upstream[ca_file] = ssl.create_default_context(cafile=cafile)
        return context

    def masker(self, host: str, port: int, sent: Sequence[Header] = (), swapped: Sequence[Header] = ()) -> Masker:
        """What turns the secrets of ``host``:``port`` back into their placeholders in an answer, and each
        credential ``swap`` changed (``sent`` became ``swapped``: a Basic pair is base64) back into what was sent."""
        pairs = [
            (i.secret.reveal_bytes(), i.placeholder.reveal_bytes())
            for i in self._injections
            if (host, port) in i.hosts and i.secret.reveal_bytes()
        ]
        for (_, before), (_, after) in zip(sent, swapped, strict=True):
            if before != after:
                pairs.append((after.partition(b" ")[2].strip() or after, before.partition(b" ")[2].strip() or before))
        return Masker(pairs)

    def swap(self, host: str, port: int, headers: Sequence[Header]) -> list[Header]:
        """``headers`` with each placeholder of a credential of ``host``:``port`` replaced by its secret."""
        mine = [i for i in self._injections if (host, port) in i.hosts and not self.revoked]
        if not mine:
            return list(headers)
        return [(name, _swapped(name, value, mine)) for name, value in headers]


class Masker:
    """Replaces each secret by its placeholder in a body that arrives in pieces (a secret may span two)."""

    def __init__(self, pairs: Sequence[tuple[bytes, bytes]]) -> None:
        self._pairs = [(secret, placeholder) for secret, placeholder in pairs if secret]
        self._keep = max((len(secret) for secret, _ in self._pairs), default=1) - 1
        self._carry = b""

    def feed(self, data: bytes) -> bytes:
        """What can go on now; up to a secret's length less one byte waits for the next piece."""
        if not self._pairs:
            return data
        buffer = self._carry + data
        for secret, placeholder in self._pairs:
            buffer = buffer.replace(secret, placeholder)
        cut = max(0, len(buffer) - self._keep)
        self._carry = buffer[cut:]
        return buffer[:cut]

    def flush(self) -> bytes:
        rest, self._carry = self._carry, b""
        return rest

    @property
    def active(self) -> bool:
        """Whether there is a secret to mask (then a compressed body, which cannot be checked, is refused)."""
        return bool(self._pairs)

    def whole(self, value: bytes) -> bytes:
        """``value`` (a header value or reason, never in pieces) with each secret replaced by its placeholder."""
        for secret, placeholder in self._pairs:
            value = value.replace(secret, placeholder)
        return value


def _swapped(name: bytes, value: bytes, injections: Sequence[Injection]) -> bytes:
    whole = [injection for injection in injections if name in injection.token_headers]
    if whole:
        return _exchange(value, whole) or value
    if name != b"authorization":
        return value
    scheme, space, credential = value.partition(b" ")
    credential = credential.strip()
    if not space:
        return value
    if scheme.lower() in (b"bearer", b"token"):
        secret = _exchange(credential, injections)
        return scheme + b" " + secret if secret is not None else value
    if scheme.lower() == b"basic":
        try:
            user, colon, password = base64.b64decode(credential, validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return value
        if not colon:
            return value
        new_user, new_password = _exchange(user, injections), _exchange(password, injections)
        if new_user is None and new_password is None:
            return value
        pair = (new_user or user) + b":" + (new_password or password)
        return scheme + b" " + base64.b64encode(pair)
    return value


def _exchange(candidate: bytes, injections: Sequence[Injection]) -> bytes | None:
    for injection in injections:
        if hmac.compare_digest(candidate, injection.placeholder.reveal_bytes()):
            return injection.secret.reveal_bytes()
    return None
