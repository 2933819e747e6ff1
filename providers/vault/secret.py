"""``kind: secret``: one field of a KV v2 secret, which only the egress proxy ever holds.

A model API key, a registry token, a SaaS key: a static secret kept in
Vault's KV v2 engine (``secret_mount``, ``secret`` by default). The manifest
names its ``path`` and ``field``, the ``hosts`` it goes to and the
``header`` it goes in (``"Authorization: Bearer {}"``, ``"x-api-key: {}"``:
any header name, ``{}`` standing for the secret), and optionally ``env``,
the variable that holds the placeholder in the command's environment. It is
delivered only with ``inject: proxy``: the sandbox gets a placeholder, the
proxy puts the value into that header of requests to those hosts. A grant
lists the paths (``secret_paths``, globs where ``*`` stops at ``/``), the
hosts such secrets may go to (``secret_hosts``, globs over ``HOST:PORT``)
and the headers they may go in (``secret_headers``, templates; without it
only ``Authorization: Bearer {}``, the header made for credentials, which
services neither log nor reflect); anything else is denied. The manifest
is the agent's: where the key goes is the grant's to say, or a key could be
sent in ``User-Agent`` or ``Referer`` for a service to log, forward or
show. Reading it mints nothing at Vault, so revoking it is the proxy
forgetting it; the KV version read is the credential's reference (a new
version is what a renewal swaps in). ``current_version``
reads the secret's KV metadata (``read`` on ``MOUNT/metadata/PATH``), which
a running session polls to notice a new version
(``broker.core.running.refreshing``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from broker.vocab.errors import ProviderError
from broker.vocab.fields import Fields
from broker.vocab.globs import any_match
from broker.vocab.secret import Secret
from providers.base import MintContext, MintedCredential
from providers.delivery import ProxyDelivery
from providers.vault.dynamic import DynamicRequest

if TYPE_CHECKING:
    from providers.vault.leases import Engines

#: A KV path: segments of letters, digits, ``_ . -``; no ``..``, no leading or trailing ``/``.
SECRET_PATH = re.compile(r"(?!.*(^|/)\.\.?(/|$))[A-Za-z0-9_.-]{1,128}(/[A-Za-z0-9_.-]{1,128}){0,15}")
SECRET_PATH_GLOB = re.compile(r"[A-Za-z0-9_.*?-]{1,128}(/[A-Za-z0-9_.*?-]{1,128}){0,15}")
FIELD = re.compile(r"[A-Za-z0-9_.-]{1,128}")
#: ``HOST:PORT`` as far as the provider looks (the core parses it strictly as a network destination).
HOST = re.compile(r"[a-z0-9.-]{1,253}:[0-9]{1,5}|\[[0-9a-f:.]{2,45}\]:[0-9]{1,5}")
HOST_GLOB = re.compile(r"[a-z0-9*?.-]{1,253}:[0-9*?]{1,5}|\[[0-9a-f:.]{2,45}\]:[0-9]{1,5}")
#: An HTTP header name (RFC 9110 token), ``: ``, then printable text holding ``{}`` once.
HEADER = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}: [\x20-\x7e]{0,64}")
#: Headers the proxy or the connection owns: a secret never goes in them.
FORBIDDEN_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "proxy-authorization"}
)
MAX_VALUE = 8192


@dataclass(frozen=True)
class SecretRequest(DynamicRequest):
    """A field of a KV v2 secret, for the proxy to put into ``header`` of requests to ``hosts``."""

    path: str = ""
    field: str = ""
    hosts: tuple[str, ...] = ()
    header: str = ""
    env: str | None = None

    kind = "secret"

    def scope(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "field": self.field, "hosts": list(self.hosts)}

    def delivery(self) -> ProxyDelivery:
        return ProxyDelivery(hosts=self.hosts, header=self.header, env=self.env)


def _header(fields: Fields, key: str, header: str) -> str:
    """``header`` checked as a template: ``{}`` exactly once, not in a header the connection owns."""
    header_name, _, template = header.partition(": ")
    if template.count("{}") != 1:
        raise fields.fail(key, "must hold {} (where the secret goes) exactly once")
    if header_name.lower() in FORBIDDEN_HEADERS:
        raise fields.fail(key, f"{header_name.lower()} is the connection's own header; name another")
    return header


def same_header(one: str, other: str) -> bool:
    """Whether two templates put the secret in the same place, compared as the proxy fills them: the header's
    name and the text before ``{}`` without regard to case, the text after it exactly."""
    (name, _, template), (other_name, _, other_template) = one.partition(": "), other.partition(": ")
    before, _, after = template.partition("{}")
    other_before, _, other_after = other_template.partition("{}")
    return name.lower() == other_name.lower() and before.lower() == other_before.lower() and after == other_after


def parse_secret_request(fields: Fields, *, name: str, provider: str, ttl: int | None) -> SecretRequest:
    """The manifest keys of ``kind: secret`` (untrusted): path, field, hosts, header, env."""
    path = fields.req_string("path", pattern=SECRET_PATH, max_len=1024, hint="segments of letters, digits, '_.-'")
    field = fields.req_string("field", pattern=FIELD, max_len=128, hint="letters, digits, '_', '.', '-'")
    hosts = fields.string_list("hosts", pattern=HOST, max_items=16, max_len=262, hint="HOST:PORT")
    assert hosts is not None
    header = fields.req_string("header", pattern=HEADER, max_len=160, hint='a header line such as "x-api-key: {}"')
    header = _header(fields, "header", header)
    env = fields.string("env", required=False, max_len=64)
    return SecretRequest(
        name=name, provider=provider, ttl=ttl, path=path, field=field, hosts=hosts, header=header, env=env
    )


#: The headers a grant without ``secret_headers`` lets a ``kind: secret`` go in.
DEFAULT_HEADERS = ("Authorization: Bearer {}",)


@dataclass(frozen=True)
class SecretGrant:
    """The ``kind: secret`` part of a ``vault`` grant: which KV paths, to which hosts, in which headers; empty
    grants nothing."""

    paths: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    headers: tuple[str, ...] = DEFAULT_HEADERS

    def check(self, request: SecretRequest) -> list[str]:
        reasons = []
        if not any_match(self.paths, request.path):
            reasons.append(f"vault secret path {request.path!r} is not granted (secret_paths)")
        reasons.extend(
            f"secret host {host!r} is not granted (secret_hosts)"
            for host in request.hosts
            if not any_match(self.hosts, host)
        )
        if not any(same_header(request.header, header) for header in self.headers):
            reasons.append(f"secret header {request.header!r} is not granted (secret_headers)")
        return reasons


def compile_secret_grant(fields: Fields) -> SecretGrant:
    paths = fields.string_list(
        "secret_paths", required=False, pattern=SECRET_PATH_GLOB, max_items=100, max_len=1024, hint="a KV path glob"
    )
    hosts = fields.string_list(
        "secret_hosts", required=False, pattern=HOST_GLOB, max_items=100, max_len=262, hint="a HOST:PORT glob"
    )
    headers = fields.string_list(
        "secret_headers", required=False, pattern=HEADER, max_items=16, max_len=160, hint='such as "x-api-key: {}"'
    )
    if paths and not hosts:
        raise fields.fail("secret_paths", "needs secret_hosts (the hosts these secrets may be sent to)")
    if hosts and not paths:
        raise fields.fail("secret_hosts", "only goes with secret_paths")
    if headers is not None and not paths:
        raise fields.fail("secret_headers", "only goes with secret_paths")
    for index, header in enumerate(headers or ()):
        _header(fields, f"secret_headers[{index}]", header)
    return SecretGrant(paths=paths or (), hosts=hosts or (), headers=headers or DEFAULT_HEADERS)


def read_secret(engines: Engines, request: SecretRequest, context: MintContext) -> MintedCredential:
    """The field's current value and the KV version it came from; nothing is created at Vault."""
    mount = engines.mounts["secret"]
    with engines.vault.errors(f"read {mount}/data/{request.path}"):
        response = engines.vault.client().secrets.kv.v2.read_secret_version(
            path=request.path, mount_point=mount, raise_on_deleted_version=True
        )
    data = (response or {}).get("data") or {}
    value = (data.get("data") or {}).get(request.field)
    version = str((data.get("metadata") or {}).get("version") or "")
    where = f"vault {engines.name}: {mount}/{request.path}"
    if not isinstance(value, str) or not value:
        raise ProviderError(f"{where} has no text field {request.field!r}", retryable=False)
    if len(value) > MAX_VALUE or not value.isprintable() or any(c.isspace() for c in value):
        raise ProviderError(
            f"{where}: field {request.field!r} is not a header value (printable, no spaces)", retryable=False
        )
    secret = Secret(value)
    return MintedCredential(
        reference={"kind": "secret", "path": request.path, "field": request.field, "version": version},
        secret=secret,
        files={"secret": secret},
        expires_at=context.session_expires_at,
        scope=request.scope(),
    )


def current_version(engines: Engines, request: SecretRequest) -> str:
    """The KV secret's ``current_version`` (its metadata: no value is read); an error when the current version
    is deleted or destroyed (a read of it would fail: the value in use stays)."""
    mount = engines.mounts["secret"]
    where = f"vault {engines.name}: {mount}/{request.path}"
    with engines.vault.errors(f"read {mount}/metadata/{request.path}"):
        response = engines.vault.client().secrets.kv.v2.read_secret_metadata(path=request.path, mount_point=mount)
    data = (response or {}).get("data") or {}
    version = data.get("current_version")
    if not isinstance(version, int) or isinstance(version, bool) or version <= 0:
        raise ProviderError(f"{where} has no current version", retryable=False)
    facts = (data.get("versions") or {}).get(str(version)) or {}
    if facts.get("destroyed"):
        raise ProviderError(f"{where}: its current version {version} is destroyed", retryable=False)
    if _passed(facts.get("deletion_time")):
        raise ProviderError(f"{where}: its current version {version} is deleted", retryable=False)
    return str(version)


def _passed(when: object) -> bool:
    """Whether a KV ``deletion_time`` (RFC 3339, empty when none; in the future under ``delete_version_after``)
    has come."""
    if not isinstance(when, str) or not when:
        return False
    try:
        at = datetime.strptime(when[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return True  # a time that does not parse: taken as deleted, the value in use stays
    return at <= datetime.now(UTC)
