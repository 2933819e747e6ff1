"""A header template: any service's secret, put by the proxy into the one header its API reads.

A ``kind: secret`` credential names the header it goes in, as a template
(``Authorization: Bearer {}``, ``x-api-key: {}``, any header name; ``{}`` is
the secret). The sandbox holds a placeholder of the secret's shape; in a
request to the credential's hosts, a header of that name whose value is the
template filled with the placeholder gets the template filled with the
secret instead (the text around ``{}`` compared without regard to case:
``bearer`` is ``Bearer``). The placeholder anywhere else (another header,
the path, the body, another host) goes out as it is, worthless. Answers are
masked like the token swap's (``mask_pairs``): the secret never comes back
into the sandbox. A renewed value (a new KV version, ``rotated``) stays
behind the same placeholder even when its length differs; an answer echoing
it then shows a stand-in of its own length (the placeholder cut or
extended), so the answer's framing holds.
"""

from __future__ import annotations

import hmac
import secrets
import string
from collections.abc import Sequence
from pathlib import Path

from broker.egress.injectors.interface import Header, HeadOnly, RequestHead
from broker.egress.operations import Answer
from broker.vocab.secret import Secret

ALPHABET = string.ascii_letters + string.digits  # a stand-in extended past its placeholder


class HeaderTemplate:
    """The injector (``broker.egress.injectors.interface``) of one secret into one header of its hosts' requests."""

    def __init__(
        self,
        credential: str,
        hosts: frozenset[tuple[str, int]],
        header: str,
        placeholder: Secret,
        secret: Secret,
        upstream_ca_file: Path | None = None,
    ) -> None:
        name, _, template = header.partition(": ")
        before, _, after = template.partition("{}")
        self._header = header
        self._credential = credential
        self._hosts = hosts
        self._name = name.lower().encode("ascii")
        self._before, self._after = before.encode("ascii"), after.encode("ascii")
        self._placeholder = placeholder.reveal_bytes()
        self._secret: bytes | None = secret.reveal_bytes() or None
        self._upstream_ca_file = upstream_ca_file
        self._placeholder_secret = placeholder
        self._stand_in = _stand_in(self._placeholder, len(self._secret or b""))

    @property
    def credential(self) -> str:
        return self._credential

    @property
    def hosts(self) -> frozenset[tuple[str, int]]:
        return self._hosts

    @property
    def upstream_ca_file(self) -> Path | None:
        return self._upstream_ca_file

    def _filled(self, value: bytes, secret: bytes) -> bytes | None:
        """The template filled with ``secret`` when ``value`` is the template filled with the placeholder."""
        before, after = self._before, self._after
        if len(value) != len(before) + len(self._placeholder) + len(after):
            return None
        middle = value[len(before) : len(value) - len(after)]
        if value[: len(before)].lower() != before.lower() or not value.endswith(after):
            return None
        return before + secret + after if hmac.compare_digest(middle, self._placeholder) else None

    def begin(self, head: RequestHead) -> HeadOnly | Answer | None:
        secret = self._secret
        if secret is None:
            return None
        headers: list[Header] = []
        changed = False
        for name, value in head.headers:
            filled = self._filled(value, secret) if name == self._name else None
            changed = changed or filled is not None
            headers.append((name, value if filled is None else filled))
        return HeadOnly(RequestHead(head.method, head.target, tuple(headers))) if changed else None

    def mask_pairs(self) -> Sequence[tuple[bytes, bytes]]:
        secret = self._secret
        return [(secret, self._stand_in)] if secret is not None else []

    def forget(self) -> None:
        self._secret = None

    def rotated(self, secret: Secret) -> HeaderTemplate:
        """The same template behind the same placeholder, for the renewed ``secret`` (a new KV version)."""
        return HeaderTemplate(
            self._credential, self._hosts, self._header, self._placeholder_secret, secret, self._upstream_ca_file
        )


def _stand_in(placeholder: bytes, length: int) -> bytes:
    """What an answer shows in place of a secret of ``length`` bytes: the placeholder, cut or extended with
    random letters and digits to that length (the same length keeps a body's framing)."""
    if len(placeholder) >= length:
        return placeholder[:length]
    return placeholder + "".join(secrets.choice(ALPHABET) for _ in range(length - len(placeholder))).encode()
