"""A gateway session's proxy credential: ``s-ID:SECRET`` in ``Proxy-Authorization: Basic``, kept as a keyed hash.

The secret is made once, when the session is issued (``GatewayPass``), and
written into the session's directory (``proxy/credential``, 0400, and
``proxy/env``: the proxy variables with it, for ``--env-file`` or a shell's
``.``); the gateway keeps only ``HMAC-SHA256(key, secret)`` under a key of its
own, made when it starts and never written anywhere. A request names its
session by the proxy user name (the session id) and proves it holds the
session's credential with the password: ``Keys.matches`` compares the keyed
hashes with ``hmac.compare_digest``, and a session the gateway does not hold
is compared against a stand-in hash, so the work is the same whichever part
was wrong. The secret is 43 characters of the URL-safe base64 alphabet (256
bits): it needs no quoting in a URL, an env file or a shell.

The proxy URL a session document names carries the user and never the secret
(``https://s-ID@gateway:3128``): the document is printed and logged by
launchers; the secret stays in the 0400 file.

A gateway whose certificate comes from a CA of the operator's own (``[gateway]
ca_file``) puts that CA into the session's ``ca-bundle.pem``; clients that
check a proxy against a setting of their own are pointed at it: git by
``GIT_PROXY_SSL_CAINFO``, curl by ``proxy/.curlrc`` (``CURL_HOME``), while
requests, pip and boto3 check the proxy against the bundle they are given for
their hosts.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from broker.vocab.secret import Secret

SECRET_BYTES = 32
PROXY_DIR = "proxy"  # the session directory's folder for the proxy credential
CREDENTIAL_FILE, ENV_FILE, CURLRC = "credential", "env", ".curlrc"
REALM = "broker gateway"
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
#: Clients that would otherwise try every proxy authentication scheme first (git: libcurl's "any") send Basic at
#: once; loopback and the container's own names never go through the proxy.
QUIET_HINTS = {
    "GIT_HTTP_PROXY_AUTHMETHOD": "basic",
    "NO_PROXY": "localhost,127.0.0.1",
    "no_proxy": "localhost,127.0.0.1",
}


class Keys:
    """The gateway's key for the proxy credentials' hashes (made at start, in memory only)."""

    def __init__(self) -> None:
        self._key = os.urandom(32)
        self._stand_in = self.digest(secrets.token_bytes(SECRET_BYTES))

    def digest(self, secret: bytes) -> bytes:
        return hmac.new(self._key, secret, hashlib.sha256).digest()

    def matches(self, password: bytes, digest: bytes | None) -> bool:
        """Whether ``password`` is the secret of ``digest`` (None: a session the gateway does not hold, compared
        all the same), in constant time."""
        expected = self._stand_in if digest is None else digest
        return hmac.compare_digest(self.digest(password), expected) and digest is not None


def basic_credentials(headers: Iterable[tuple[bytes, bytes]]) -> tuple[str, bytes] | None:
    """The user and password of the request's ``Proxy-Authorization: Basic``; None when there is none, or not one
    that reads (a second header, another scheme, bad base64, no colon, a user that is not ASCII)."""
    found = [value for name, value in headers if name.lower() == b"proxy-authorization"]
    if len(found) != 1:
        return None
    scheme, _, token = found[0].strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(b":")
    if not colon:
        return None
    try:
        return user.decode("ascii"), password
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True)
class Address:
    """Where sandboxes reach the gateway: its scheme (https with TLS, else http), host and port."""

    scheme: str
    host: str
    port: int
    ca_pem: bytes = b""  # what a client needs to trust the gateway's certificate (``[gateway] ca_file``)

    def url(self, user: str, secret: str | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        userinfo = user if secret is None else f"{user}:{secret}"
        return f"{self.scheme}://{userinfo}@{host}:{self.port}"


@dataclass
class GatewayPass:
    """One session's proxy credential, from its issue until the gateway holds its hash: its secret, written into the
    session's directory, then forgotten (``forget``)."""

    address: Address
    keys: Keys
    _secret: Secret | None = field(default_factory=lambda: Secret(secrets.token_urlsafe(SECRET_BYTES)))

    @property
    def digest(self) -> bytes:
        assert self._secret is not None, "the proxy credential was forgotten"
        return self.keys.digest(self._secret.reveal_bytes())

    def proxy_url(self, session_id: str) -> str:
        """The session's proxy URL without its secret (what the session document shows)."""
        return self.address.url(session_id)

    def files(self, session_id: str, bundle: PurePosixPath | None = None) -> dict[str, Secret | str]:
        """``proxy/credential`` (the secret) and ``proxy/env`` (the proxy variables, secret included); with a
        ``bundle`` holding the gateway's CA (the sandbox's path), ``proxy/.curlrc`` pointing curl at it."""
        assert self._secret is not None, "the proxy credential was forgotten"
        url = self.address.url(session_id, self._secret.reveal())
        lines = "".join(f"{name}={url}\n" for name in PROXY_VARIABLES)
        files: dict[str, Secret | str] = {CREDENTIAL_FILE: self._secret, ENV_FILE: Secret(lines)}
        if bundle is not None:
            files[CURLRC] = f'proxy-cacert = "{bundle}"\n'
        return files

    def hints(self, mount_path: PurePosixPath, bundle: PurePosixPath | None) -> dict[str, str]:
        """The variables that make the sandbox's clients use the proxy as this gateway expects (never the secret:
        the proxy variables themselves are ``proxy/env``'s)."""
        hints = dict(QUIET_HINTS)
        if bundle is not None:
            hints |= {"GIT_PROXY_SSL_CAINFO": str(bundle), "CURL_HOME": str(mount_path / PROXY_DIR)}
        return hints

    def forget(self) -> None:
        self._secret = None
