"""The task manifest: untrusted input describing one session and its credentials.

Loading is strict (see ``strictdata``): the generic fields are checked here,
each credential's provider-specific fields by its provider type. Every error
is a ``ManifestError`` naming the offending field; nothing is minted for an
invalid manifest.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from broker.core.inputs.config import Config
from broker.core.inputs.limits import read_limits
from broker.core.inputs.strictdata import TaskFile, read_task_file
from broker.egress.allowlist.lists import read_network_section
from broker.egress.destinations import Destination, DestinationError, allowed, parse_destination
from broker.egress.operations import NO_OPERATIONS, Operations, check_network, read_operations
from broker.host.limits import NO_LIMITS, Limits
from broker.host.sandbox import BROKER_DIR
from broker.vocab.errors import ManifestError
from broker.vocab.fields import Fields, shown
from providers.base import CredentialRequest
from providers.registry import provider_classes

TASK_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
CREDENTIAL_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
MOUNT_PATH = re.compile(r"(/[A-Za-z0-9_][A-Za-z0-9._-]{0,63}){1,8}")
MAX_ID = 2**31 - 1
DEFAULT_MOUNT_PATH = PurePosixPath("/run/secrets")
SYSTEM_PATHS = frozenset(
    {
        "/bin",
        "/boot",
        "/etc",
        "/home",
        "/lib",
        "/lib64",
        "/opt",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/tmp",
        "/usr",
        "/var",
        "/workspace",
    }
)


INJECT_MODES = ("file", "proxy")
ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
#: Names the broker sets itself, or that change how programs load; each provider type adds its own
#: (``Provider.reserved_env``: what its credentials set, or what would redirect them).
RESERVED_ENV = frozenset({"PATH", "HOME", "BROKER_SESSION", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH"})
#: Every BROKER_* name is the broker's: BROKER_SESSION and the certificate hints BROKER_<NAME>_CERT, _KEY, _CA.
RESERVED_ENV_PREFIX = "BROKER_"
SECRET_LOOKING = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|PRIVATE|(^|_)KEY($|_)|AUTH")
ENV_VALUE = re.compile(r"[\x20-\x7e]{0,1024}")


@dataclass(frozen=True)
class Sandbox:
    uid: int
    gid: int
    mount_path: PurePosixPath
    env: tuple[tuple[str, str], ...] = ()
    limits: Limits = NO_LIMITS  # sandbox.limits: capped by the rules' (broker.core.inputs.limits)
    read_only_root: bool = True  # a container's root file system (bubblewrap's is always read-only)


@dataclass(frozen=True)
class Manifest:
    task: str
    ttl: int | None
    sandbox: Sandbox
    credentials: tuple[CredentialRequest, ...]
    network: tuple[Destination, ...] = ()  # network.allow: what the sandbox may reach through the egress proxy
    proxied: tuple[str, ...] = ()  # credentials with inject: proxy: the files hold a placeholder, the proxy the secret
    operations: Operations = NO_OPERATIONS  # narrows the rule's operations (``broker.egress.operations.narrow``)
    # The document as given (non-secret), kept so `renew` can decide again and re-mint; not part of equality.
    source: str = field(default="", compare=False, repr=False)
    source_is_json: bool = field(default=False, compare=False, repr=False)

    def stored(self, network_rule: str | None) -> dict[str, object]:
        """What a session's record keeps of it (``SessionRecord.manifest``): the document as given, and the rule
        whose network allowed its destinations (the one ``session allow`` may add to; None: no network)."""
        return {"json": self.source_is_json, "text": self.source, "network_rule": network_rule}


def load_manifest(source: str, config: Config) -> Manifest:
    task_file = read_task_file(source)
    return parse_manifest(task_file.data, config, as_json=task_file.as_json, what=task_file.what)


def parse_manifest(
    data: bytes,
    config: Config,
    *,
    as_json: bool = False,
    what: str = "manifest",
    identity: tuple[int, int] | None = None,
) -> Manifest:
    """The manifest in ``data``; a sandbox without ``uid``/``gid`` is ``identity`` (uid, gid): the caller's,
    which is this process's own unless given (the daemon gives its peer's, a renewal the session's)."""
    document = TaskFile(data, as_json, what).document()
    fields = Fields(document, "", ManifestError)
    version = fields.integer("version", required=True)
    if version != 1:
        raise ManifestError("version: only version 1 is supported")
    task = fields.req_string("task", pattern=TASK_NAME, max_len=63, hint="lower-case letters, digits, '.', '_', '-'")
    ttl = fields.duration("ttl")
    own = identity if identity is not None else (os.getuid(), os.getgid())
    sandbox = _parse_sandbox(fields.mapping("sandbox", required=False), own)
    parsed = [_parse_credential(item, config, ttl) for item in fields.list_of_mappings("credentials")]
    credentials = tuple(request for request, _ in parsed)
    network = read_network_section(fields.mapping("network", required=False))
    operations = read_operations(fields.mapping("operations", required=False))
    check_network(fields, operations, network, "network.allow")
    proxied = tuple(request.name for request, inject in parsed if inject == "proxy")
    for index, (request, inject) in enumerate(parsed):
        if inject == "proxy":
            _check_proxied(request, index, config, network)
    for index, (request, inject) in enumerate(parsed):
        _check_delivery(request, inject, index, network, sandbox, credentials[:index])
    names = [c.name for c in credentials]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise ManifestError(f"credentials[{index}].name: {name!r} is used twice")
    fields.done()
    return Manifest(
        task=task,
        ttl=ttl,
        sandbox=sandbox,
        credentials=credentials,
        network=network,
        proxied=proxied,
        operations=operations,
        source=data.decode("utf-8"),
        source_is_json=as_json,
    )


def _parse_sandbox(fields: Fields | None, identity: tuple[int, int]) -> Sandbox:
    if fields is None:
        return Sandbox(uid=identity[0], gid=identity[1], mount_path=DEFAULT_MOUNT_PATH)
    uid = fields.integer("uid", minimum=0, maximum=MAX_ID)
    gid = fields.integer("gid", minimum=0, maximum=MAX_ID)
    env = _parse_env(fields.mapping("env", required=False))
    limits = read_limits(fields.mapping("limits", required=False))
    read_only_root = fields.boolean("read_only_root", True)
    mount = fields.string("mount_path", required=False, max_len=512)
    mount_path = DEFAULT_MOUNT_PATH
    if mount is not None:
        if not MOUNT_PATH.fullmatch(mount) or any(p in ("..", ".") for p in mount.split("/")):
            raise ManifestError(f"sandbox.mount_path: {shown(mount)} is not an absolute, normalised path")
        mount_path = PurePosixPath(mount)
        if str(mount_path) in SYSTEM_PATHS or mount_path.parts[1] in ("proc", "sys", "dev"):
            raise ManifestError(f"sandbox.mount_path: {shown(mount)} would cover a system directory of the sandbox")
        if mount_path.is_relative_to(BROKER_DIR):
            raise ManifestError(f"sandbox.mount_path: {shown(mount)} is where the sandbox reaches the broker")
    fields.done()
    return Sandbox(
        uid=identity[0] if uid is None else uid,
        gid=identity[1] if gid is None else gid,
        mount_path=mount_path,
        env=env,
        limits=limits,
        read_only_root=read_only_root,
    )


@functools.cache
def reserved_env() -> frozenset[str]:
    """``RESERVED_ENV`` and every provider type's own (each type is imported once, when a manifest sets env)."""
    return RESERVED_ENV.union(*(cls.reserved_env for cls in provider_classes()))


def _parse_env(fields: Fields | None) -> tuple[tuple[str, str], ...]:
    """``sandbox.env``: extra non-secret variables for ``broker exec`` (names checked, secrets refused)."""
    if fields is None:
        return ()
    items = fields.items()
    if len(items) > 32:
        raise ManifestError("sandbox.env: more than 32 variables")
    result = []
    for name, value in items:
        where = fields.where(name)  # escaped and bounded: the name is untrusted
        if not ENV_NAME.fullmatch(name):
            raise ManifestError(f"{where}: variable names are upper-case letters, digits and _")
        if name in reserved_env() or name.startswith(RESERVED_ENV_PREFIX):
            raise ManifestError(f"{where}: set by the broker or the loader; not allowed here")
        if SECRET_LOOKING.search(name):
            raise ManifestError(f"{where}: looks like a secret; secrets never go into the environment")
        if not isinstance(value, str) or not ENV_VALUE.fullmatch(value):
            raise ManifestError(f"{where}: expected printable text of at most 1024 characters")
        result.append((name, value))
    return tuple(result)


def _check_proxied(request: CredentialRequest, index: int, config: Config, network: tuple[Destination, ...]) -> None:
    """``inject: proxy`` needs a provider with ``proxy_hosts``, a credential whose secret the proxy can stand in
    for (``CredentialRequest.proxy_refusal``), and each host in ``network``
    (a credential naming its own hosts and header: ``_check_delivery``)."""
    where = f"credentials[{index}].inject"
    if request.delivery() is not None:
        return
    target = config.proxy_targets.get(request.provider)
    if target is None:
        raise ManifestError(f"{where}: provider {request.provider!r} has no proxy_hosts in the config")
    refusal = request.proxy_refusal()
    if refusal is not None:
        raise ManifestError(f"{where}: {refusal}")
    for host in target.hosts:
        if not allowed(network, host.host, host.port):
            raise ManifestError(f"{where}: network.allow must list {host} (the proxy puts the secret in there)")


def _check_delivery(
    request: CredentialRequest,
    inject: str,
    index: int,
    network: tuple[Destination, ...],
    sandbox: Sandbox,
    earlier: tuple[CredentialRequest, ...],
) -> None:
    """A credential naming its own hosts and header (``kind: secret``) goes only by the proxy, to hosts written
    as network destinations (one spelling: the grant's ``secret_hosts`` compare them as text) that
    ``network.allow`` lists; its ``env`` variable is one the broker and the loader leave alone, named once."""
    delivery = request.delivery()
    if delivery is None:
        return
    where = f"credentials[{index}]"
    if inject != "proxy":
        raise ManifestError(f"{where}.inject: a {request.provider} secret goes only by the proxy (inject: proxy)")
    for number, text in enumerate(delivery.hosts):
        try:
            host = parse_destination(text)
        except DestinationError as exc:
            raise ManifestError(f"{where}.hosts[{number}]: {exc}") from None
        if host.wildcard:
            raise ManifestError(f"{where}.hosts[{number}]: name one host (no wildcard): the secret goes there")
        if not allowed(network, host.host, host.port):
            raise ManifestError(f"{where}.hosts[{number}]: network.allow must list {host} (the secret goes there)")
    name = delivery.env
    if name is None:
        return
    if not ENV_NAME.fullmatch(name):
        raise ManifestError(f"{where}.env: variable names are upper-case letters, digits and _")
    if name in reserved_env() or name.startswith(RESERVED_ENV_PREFIX) or name in dict(sandbox.env):
        raise ManifestError(f"{where}.env: {name} is set by the broker, the loader or sandbox.env; name another")
    if any((other.delivery() or delivery).env == name for other in earlier if other.delivery() is not None):
        raise ManifestError(f"{where}.env: {name} is named by another credential")


def _parse_credential(fields: Fields, config: Config, session_ttl: int | None) -> tuple[CredentialRequest, str]:
    name = fields.req_string("name", pattern=CREDENTIAL_NAME, max_len=32, hint="lower-case letters, digits, '_', '-'")
    provider_name = fields.req_string("provider", max_len=64)
    if provider_name not in config.providers:
        known = ", ".join(sorted(config.providers)) or "none configured"
        raise fields.fail("provider", f"unknown provider {shown(provider_name)} (known: {known})")
    ttl = fields.duration("ttl")
    inject = fields.string("inject", required=False, max_len=16) or "file"
    if inject not in INJECT_MODES:
        raise fields.fail("inject", "must be file or proxy")
    facts = config.providers[provider_name].proxy
    if inject == "proxy" and facts is None:
        labels = " and ".join(sorted(cls.proxy.label for cls in provider_classes() if cls.proxy is not None))
        raise fields.fail("inject", f"only {labels} credentials can be put in by the proxy")
    if inject != "proxy" and facts is not None and facts.proxy_only:
        raise fields.fail(
            "inject", f"{facts.label} tokens go only by the proxy (inject: proxy), never into the sandbox"
        )
    if ttl is not None and session_ttl is not None and ttl > session_ttl:
        raise fields.fail("ttl", "longer than the session's ttl")
    provider_cls = type(config.providers[provider_name])
    request: CredentialRequest = provider_cls.parse_request(fields, name=name, provider=provider_name, ttl=ttl)
    fields.done()
    return request, inject
