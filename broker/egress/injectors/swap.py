"""The header swap of a token: the sandbox holds a worthless placeholder, the proxy puts the real token in.

A placeholder has the shape of the token it stands for, so clients accept
it unchanged; nothing else of the token is in it (its provider makes it:
``providers.placeholders``). ``HeaderSwap`` is the injector (``broker.egress.injectors.interface``) of
such a token: it swaps the placeholder for the secret only in requests to
the credential's own hosts (which the proxy reaches over verified TLS) and
only in ``Authorization`` (``Bearer``, ``token``, ``Basic`` with any user
name, the way git sends it) and the headers its provider names as holding
the token whole (``Injection.token_headers``). Anywhere else the
placeholder goes out as it is. An answer can carry the secret back (a token
lookup may show the token's id): in the body of every answer from those
hosts, asked for without compression, the ``Masker``
(``broker.egress.terminate.masking``) turns the secret, raw, URL-encoded, in base64
or in hex, into its placeholder so spelled (the same lengths, so the
framing holds). Once the session is revoked, the proxy refuses every
request to those hosts at once, before the provider's own revocation lands.
What a request to those hosts must be (its own ``Host``; nothing the
credential's provider guards against, ``Injection.guard``: an
``AnswerGuard``, the provider type's ``ProxyFacts`` as the core hands them
over) is ``broker.egress.terminate.guards``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from broker.egress.injectors.interface import HeadOnly, RequestHead
from broker.egress.operations import Answer
from broker.vocab.secret import Secret

Header = tuple[bytes, bytes]


@dataclass(frozen=True)
class AnswerGuard:
    """What the proxy keeps from one provider's hosts beyond the placeholder swap, as its type declares it."""

    label: str  # how refusals name the provider ("Vault")
    stripped_headers: frozenset[bytes] = frozenset()  # request headers taken out (lower case, "-" for "_")
    refused_key: str | None = None  # a top-level key a JSON answer may not hold ("wrap_info")
    refused_name: str = ""  # what that key holds, for the refusal ("wrapping token")

    def without_stripped(self, headers: Sequence[Header]) -> list[Header]:
        """``headers`` without the ones this guard takes out."""
        return [
            (name, value) for name, value in headers if name.lower().replace(b"_", b"-") not in self.stripped_headers
        ]


@dataclass(frozen=True)
class Injection:
    """One credential: its hosts (``host``, ``port``), the placeholder the sandbox holds, the secret it stands for."""

    hosts: frozenset[tuple[str, int]]
    placeholder: Secret
    secret: Secret
    upstream_ca_file: Path | None = None  # what the real hosts' certificates are checked against; None: the system's
    token_headers: frozenset[bytes] = frozenset()  # lower-case names of headers, beside Authorization, holding it whole
    guard: AnswerGuard | None = None  # what its provider keeps from its hosts (``broker.egress.terminate.guards``)
    name: str = ""  # the credential's name in the manifest (for the evidence records)


class HeaderSwap:
    """The injector of one ``Injection``: the placeholder becomes the secret in the headers that carry tokens."""

    def __init__(self, injection: Injection) -> None:
        self.injection = injection
        self._secret: bytes | None = injection.secret.reveal_bytes() or None

    @property
    def credential(self) -> str:
        return self.injection.name

    @property
    def hosts(self) -> frozenset[tuple[str, int]]:
        return self.injection.hosts

    @property
    def upstream_ca_file(self) -> Path | None:
        return self.injection.upstream_ca_file

    def swap(self, headers: Sequence[Header]) -> list[Header] | None:
        """``headers`` with the placeholder replaced by the secret; None when no header holds the placeholder."""
        secret = self._secret
        if secret is None:
            return None
        swapped = [(name, _swapped(name, value, self.injection, secret)) for name, value in headers]
        return swapped if swapped != list(headers) else None

    def begin(self, head: RequestHead) -> HeadOnly | Answer | None:
        swapped = self.swap(head.headers)
        if swapped is None:
            return None
        return HeadOnly(RequestHead(head.method, head.target, tuple(swapped)))

    def mask_pairs(self) -> Sequence[tuple[bytes, bytes]]:
        secret = self._secret
        return [(secret, self.injection.placeholder.reveal_bytes())] if secret is not None else []

    def forget(self) -> None:
        self._secret = None

    def rotated(self, secret: Secret) -> HeaderSwap:
        """The same swap behind the same placeholder, for the renewed ``secret``."""
        return HeaderSwap(replace(self.injection, secret=secret))


def _swapped(name: bytes, value: bytes, injection: Injection, secret: bytes) -> bytes:
    placeholder = injection.placeholder.reveal_bytes()
    if name in injection.token_headers:
        return secret if hmac.compare_digest(value, placeholder) else value
    if name != b"authorization":
        return value
    scheme, space, credential = value.partition(b" ")
    credential = credential.strip()
    if not space:
        return value
    if scheme.lower() in (b"bearer", b"token"):
        return scheme + b" " + secret if hmac.compare_digest(credential, placeholder) else value
    if scheme.lower() == b"basic":
        try:
            user, colon, password = base64.b64decode(credential, validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return value
        if not colon:
            return value
        user_is, password_is = hmac.compare_digest(user, placeholder), hmac.compare_digest(password, placeholder)
        if not user_is and not password_is:
            return value
        pair = (secret if user_is else user) + b":" + (secret if password_is else password)
        return scheme + b" " + base64.b64encode(pair)
    return value
