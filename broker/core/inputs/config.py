"""Operator configuration: the TOML file named by ``--config`` / ``BROKER_CONFIG``.

Loading validates every field and builds every provider instance (cheaply:
no network, no SDK import), so a broken config fails before any work starts.
Relative paths are taken relative to the config file's directory;
``state_dir`` and ``runtime_dir`` must be the broker's own
(``broker.core.inputs.directories``).
"""

from __future__ import annotations

import os
import re
import socket
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.audit.witness import DEFAULT_WITNESS_RETENTION, WitnessConfig, parse_witness_url
from broker.core.inputs.directories import check_own_directory, resolve_path
from broker.core.inputs.identity import IdentityConfig, parse_identity
from broker.core.inputs.instances import ProxyTarget, build_instances
from broker.core.inputs.listening import GatewayConfig, listen_address, read_gateway
from broker.core.inputs.store_url import SHAPE, store_url_problem
from broker.egress.evidence.budget import EvidenceBudget, read_evidence_budget
from broker.host.containers.engine import EngineOptions, read_engines
from broker.telemetry.settings import TelemetryConfig, parse_telemetry
from broker.vocab.errors import ConfigError
from broker.vocab.fields import Fields
from broker.vocab.files import read_regular_file, shown_path

if TYPE_CHECKING:
    from providers.base import Provider

DEFAULT_CONFIG_PATH = Path("/etc/broker/broker.toml")
CONFIG_ENV = "BROKER_CONFIG"
MAX_CONFIG_BYTES = 256 * 1024
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MOUNT_MODES = ("auto", "always", "never")

DEFAULT_SWEEP_INTERVAL = 60
DAEMON_SOCKET_NAME = "broker.sock"
DAEMON_MAX_CONNECTIONS = 512  # every peer but root together; one uid: [daemon] max_connections_per_uid
DEFAULT_MAX_CONNECTIONS_PER_UID = 32
DEFAULT_FLEET_REVOKE_WAIT = 5
#: ``[egress] secret_refresh``: how often a running session looks for a new KV version of a ``kind: secret``.
DEFAULT_SECRET_REFRESH = 60
#: ``[egress] policy_refresh``: a running session's policy is read again at least this often (and when it changes).
DEFAULT_POLICY_REFRESH = 60
MAX_FLEET_REVOKE_WAIT = 60
DEFAULT_MIN_FREE = 1 << 30  # [audit] min_free: the free room state_dir needs for a new issue


@dataclass(frozen=True)
class DaemonConfig:
    """``[daemon]``: where ``broker serve`` listens and how often it sweeps (see ``broker.daemon``)."""

    socket: Path
    socket_group: str | None = None  # a group name or number; root's group otherwise
    sweep_interval: int = DEFAULT_SWEEP_INTERVAL
    max_connections_per_uid: int = DEFAULT_MAX_CONNECTIONS_PER_UID  # root and the daemon's uid are never counted
    thin_client: bool = False  # ``socket`` was set: the session commands go through the daemon
    metrics_listen: tuple[str, int] | None = None  # an IP address and port: a plain HTTP listener for /metrics


@dataclass(frozen=True)
class Config:
    path: Path
    state_dir: Path
    runtime_dir: Path
    policy_dir: Path
    audit_key: Path
    fingerprint_key: Path
    default_ttl: int
    max_ttl: int
    mount_tmpfs: str  # auto: mount a tmpfs per session when the broker holds CAP_SYS_ADMIN
    providers: dict[str, Provider[Any]]
    witness: WitnessConfig | None = None
    proxy_targets: dict[str, ProxyTarget] = field(default_factory=dict)  # instance -> where inject: proxy applies
    store: StoreConfig | None = None  # None: the embedded SQLite file in state_dir
    host: str = ""  # this broker's name in a shared store (owner of the sessions it issues)
    daemon: DaemonConfig | None = None
    egress_upstream_ca_file: Path | None = None  # [egress] upstream_ca_file: hosts terminated with no credential
    secret_refresh: int = DEFAULT_SECRET_REFRESH  # [egress] secret_refresh: seconds between KV version checks
    policy_refresh: int = DEFAULT_POLICY_REFRESH  # [egress] policy_refresh: a running session's policy re-read
    telemetry: TelemetryConfig | None = None  # ``[telemetry] otlp_endpoint``: traces to an OTLP/HTTP collector
    min_free: int = DEFAULT_MIN_FREE  # [audit] min_free, bytes (broker.audit.room)
    evidence_budget: EvidenceBudget = field(default_factory=EvidenceBudget)  # [egress] evidence_budget
    gateway: GatewayConfig | None = None  # [gateway]: broker serve's one proxy for many sessions
    engines: dict[str, EngineOptions] = field(default_factory=dict)  # [sandbox.podman], [sandbox.docker]
    identity: IdentityConfig | None = None  # [identity]: the broker as an OpenID Connect issuer

    @property
    def daemon_settings(self) -> DaemonConfig:
        """``[daemon]``, or its defaults (the socket in ``runtime_dir``) when the config has none."""
        return self.daemon or DaemonConfig(socket=self.runtime_dir / DAEMON_SOCKET_NAME)


@dataclass(frozen=True)
class StoreConfig:
    """``store = "postgresql://USER@HOST[:PORT]/DB"``: one store for many hosts (the password in a pgpass file)."""

    url: str
    passfile: Path | None = None
    #: Seconds a revoke of a session another host holds waits for that host's daemon to finish it.
    fleet_revoke_wait: int = DEFAULT_FLEET_REVOKE_WAIT


def _store(fields: Fields, base: Path) -> StoreConfig | None:
    url = fields.string("store", required=False, max_len=1024)
    passfile = fields.string("store_passfile", required=False, max_len=4096)
    wait = fields.raw("fleet_revoke_wait")
    if url is None:
        if passfile is not None or wait is not None:
            key = "store_passfile" if passfile is not None else "fleet_revoke_wait"
            raise ConfigError(f'{key}: only with store = "postgresql://..."')
        return None
    seconds = fields.long_duration("fleet_revoke_wait", DEFAULT_FLEET_REVOKE_WAIT, allow_zero=True)
    if seconds > MAX_FLEET_REVOKE_WAIT:
        raise ConfigError(f"fleet_revoke_wait: at most {MAX_FLEET_REVOKE_WAIT}s (a revoke waits that long)")
    problem = store_url_problem(url)
    if problem == SHAPE:
        raise ConfigError(f"store: {problem}")
    if problem:
        raise ConfigError(f"store: {problem}; put it in a pgpass file named by store_passfile")
    return StoreConfig(url, resolve_path(base, passfile) if passfile else None, seconds)


def _default_host() -> str:
    name = socket.gethostname()[:64]
    return name if HOST_NAME.fullmatch(name) else "localhost"


def config_path(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    env = os.environ.get(CONFIG_ENV)
    return Path(env) if env else DEFAULT_CONFIG_PATH


def load_config(path: Path, table: dict[str, Any] | None = None) -> Config:
    """The config file at ``path``; ``table`` is its TOML when read already (the thin client's look for a daemon)."""
    if table is not None:
        return parse_config(table, path)
    hint = " (use --config or BROKER_CONFIG)"
    data, _ = read_regular_file(
        path, what="config file", max_bytes=MAX_CONFIG_BYTES, error=ConfigError, missing_hint=hint
    )
    name = f"config file {shown_path(path)}"
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{name} is not valid UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{name} is not valid TOML{_toml_problem(str(exc))}") from None
    except (RecursionError, ValueError):  # nesting too deep, an integer of thousands of digits
        raise ConfigError(f"{name} is not valid TOML: too deeply nested or a number too large") from None
    return parse_config(table, path)


_TOML_WHERE = re.compile(r"(.*?) \((?:at line (\d+), column \d+|at end of document)\)")


def _toml_problem(message: str) -> str:
    """`` at line N: problem`` from tomllib's message, with any content it quotes elided."""
    where = _TOML_WHERE.fullmatch(" ".join(message.split()))
    if where is None:
        return ": malformed"
    from broker.core.inputs.strictdata import elided  # only for a broken config: YAML stays unloaded otherwise

    line = f" at line {where.group(2)}" if where.group(2) else " at the end"
    return f"{line}: {elided(where.group(1))}"


def parse_config(table: object, path: Path) -> Config:
    base = path.resolve().parent
    fields = Fields(table, "", ConfigError)

    def path_field(key: str, default: str) -> Path:
        value = fields.string(key, required=False, max_len=4096) or default
        return resolve_path(base, value)

    state_dir = check_own_directory("state_dir", path_field("state_dir", "/var/lib/broker"))
    runtime_dir = check_own_directory("runtime_dir", path_field("runtime_dir", "/run/broker"))
    policy_dir = path_field("policy_dir", "/etc/broker/policies")
    audit_key = path_field("audit_key", "/etc/broker/audit.key")
    fingerprint_key = path_field("fingerprint_key", str(audit_key.parent / "fingerprint.key"))
    default_ttl = fields.duration("default_ttl") or 30 * 60
    max_ttl = fields.duration("max_ttl") or 12 * 3600
    if default_ttl > max_ttl:
        raise ConfigError("default_ttl: longer than max_ttl")
    mount_tmpfs = fields.string("mount_tmpfs", required=False) or "auto"
    if mount_tmpfs not in MOUNT_MODES:
        raise ConfigError(f"mount_tmpfs: must be one of {', '.join(MOUNT_MODES)}")
    witness, min_free = _audit(fields)
    store = _store(fields, base)
    host = fields.string("host", required=False, pattern=HOST_NAME, max_len=64) or _default_host()
    daemon = _daemon(fields, base, runtime_dir)
    gateway_table = fields.mapping("gateway", required=False)
    gateway = (
        read_gateway(gateway_table, lambda value: resolve_path(base, value)) if gateway_table is not None else None
    )
    egress_ca_file, secret_refresh, policy_refresh, evidence_budget = _egress(fields, base)
    telemetry_table = fields.mapping("telemetry", required=False)
    telemetry = parse_telemetry(telemetry_table, base) if telemetry_table is not None else None
    engines = read_engines(fields.mapping("sandbox", required=False))
    identity_table = fields.mapping("identity", required=False)
    identity = parse_identity(identity_table, base, audit_key) if identity_table is not None else None
    providers, proxy_targets, identity = build_instances(fields.mapping("providers", required=False), identity, base)
    fields.done()
    return Config(
        path=path,
        state_dir=state_dir,
        runtime_dir=runtime_dir,
        policy_dir=policy_dir,
        audit_key=audit_key,
        fingerprint_key=fingerprint_key,
        default_ttl=default_ttl,
        max_ttl=max_ttl,
        mount_tmpfs=mount_tmpfs,
        providers=providers,
        witness=witness,
        proxy_targets=proxy_targets,
        store=store,
        host=host,
        daemon=daemon,
        egress_upstream_ca_file=egress_ca_file,
        secret_refresh=secret_refresh,
        policy_refresh=policy_refresh,
        telemetry=telemetry,
        min_free=min_free,
        evidence_budget=evidence_budget,
        gateway=gateway,
        engines=engines,
        identity=identity,
    )


def _egress(fields: Fields, base: Path) -> tuple[Path | None, int, int, EvidenceBudget]:
    """``[egress] upstream_ca_file``: the CAs the proxy trusts for a host it terminates that no credential goes
    to (a host the operations limit); a credential's hosts keep their provider's. None: the system's CAs.
    ``secret_refresh``: how often a running session checks each ``kind: secret`` for a new KV version.
    ``policy_refresh``: how often, at the latest, a running session reads the policy again and decides itself.
    ``evidence_budget``: what each session's ``egress.request`` records may add to the log."""
    table = fields.mapping("egress", required=False)
    if table is None:
        return None, DEFAULT_SECRET_REFRESH, DEFAULT_POLICY_REFRESH, EvidenceBudget()
    ca_file = table.string("upstream_ca_file", required=False, max_len=4096)
    refresh = table.duration("secret_refresh") or DEFAULT_SECRET_REFRESH
    policy_refresh = table.duration("policy_refresh") or DEFAULT_POLICY_REFRESH
    budget = read_evidence_budget(table.mapping("evidence_budget", required=False))
    table.done()
    return (resolve_path(base, ca_file) if ca_file is not None else None), refresh, policy_refresh, budget


def _daemon(fields: Fields, base: Path, runtime_dir: Path) -> DaemonConfig | None:
    table = fields.mapping("daemon", required=False)
    if table is None:
        return None
    socket = table.string("socket", required=False, max_len=100)  # sun_path holds 108 bytes
    group = table.string("socket_group", required=False, max_len=64)
    interval = table.duration("sweep_interval") or DEFAULT_SWEEP_INTERVAL
    per_uid = table.integer("max_connections_per_uid", minimum=1, maximum=DAEMON_MAX_CONNECTIONS)
    listen = table.string("metrics_listen", required=False, max_len=64)
    table.done()
    path = resolve_path(base, socket) if socket else runtime_dir / DAEMON_SOCKET_NAME
    return DaemonConfig(
        socket=path,
        socket_group=group,
        sweep_interval=interval,
        max_connections_per_uid=per_uid or DEFAULT_MAX_CONNECTIONS_PER_UID,
        thin_client=socket is not None,
        metrics_listen=listen_address(listen, table.where("metrics_listen")) if listen is not None else None,
    )


def _audit(fields: Fields) -> tuple[WitnessConfig | None, int]:
    """``[audit]``: the witness, and ``min_free`` (the free room state_dir needs for a new issue; 0: unchecked)."""
    audit = fields.mapping("audit", required=False)
    if audit is None:
        return None, DEFAULT_MIN_FREE
    min_free = audit.size("min_free")
    url = audit.string("witness", required=False, max_len=600)
    endpoint_url = audit.string("witness_endpoint_url", required=False, max_len=1024)
    region = audit.string("witness_region", required=False, max_len=64)
    profile = audit.string("witness_profile", required=False, max_len=128)
    retention = audit.long_duration("witness_retention", DEFAULT_WITNESS_RETENTION, allow_zero=False)
    interval = audit.long_duration("witness_interval", 0, allow_zero=True)
    audit.done()
    min_free = DEFAULT_MIN_FREE if min_free is None else min_free
    if url is None:
        return None, min_free
    bucket, prefix = parse_witness_url(url, "audit.witness")
    return WitnessConfig(bucket, prefix, endpoint_url, region, profile, retention, interval), min_free
