"""Operator configuration: the TOML file named by ``--config`` / ``BROKER_CONFIG``.

Loading validates every field and builds every provider instance (cheaply:
no network, no SDK import), so a broken config fails before any work starts.
Relative paths are taken relative to the config file's directory.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from broker.errors import ConfigError
from broker.fields import Fields, shown
from providers.registry import known_types, provider_class

if TYPE_CHECKING:
    from providers.base import Provider

DEFAULT_CONFIG_PATH = Path("/etc/broker/broker.toml")
CONFIG_ENV = "BROKER_CONFIG"
MAX_CONFIG_BYTES = 256 * 1024
INSTANCE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
MOUNT_MODES = ("auto", "always", "never")


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
    mount_tmpfs: str  # auto: mount a tmpfs per session when running as root
    providers: dict[str, Provider]

    def provider(self, name: str) -> Provider:
        return self.providers[name]


def resolve_path(base: Path, value: str) -> Path:
    path = Path(value)
    return path if path.is_absolute() else (base / path)


def config_path(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    env = os.environ.get(CONFIG_ENV)
    return Path(env) if env else DEFAULT_CONFIG_PATH


def load_config(path: Path) -> Config:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found (use --config or BROKER_CONFIG)") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path} is larger than 256 KiB")
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not valid UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except (RecursionError, ValueError):  # nesting too deep, an integer of thousands of digits
        raise ConfigError(f"config file {path} is not valid TOML: too deeply nested or a number too large") from None
    return parse_config(table, path)


def parse_config(table: object, path: Path) -> Config:
    base = path.resolve().parent
    fields = Fields(table, "", ConfigError)

    def path_field(key: str, default: str) -> Path:
        value = fields.string(key, required=False, max_len=4096) or default
        return resolve_path(base, value)

    state_dir = path_field("state_dir", "/var/lib/broker")
    runtime_dir = path_field("runtime_dir", "/run/broker")
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
    providers: dict[str, Provider] = {}
    table_providers = fields.mapping("providers", required=False)
    if table_providers is not None:
        for name, _ in table_providers.items():
            if not INSTANCE_NAME.fullmatch(name):
                raise ConfigError(f"providers.{shown(name)}: instance names are lower-case letters, digits, _ and -")
            instance = table_providers.mapping(name)
            assert instance is not None
            type_name = instance.req_string("type")
            try:
                cls = provider_class(type_name)
            except KeyError:
                raise ConfigError(
                    f"providers.{name}.type: unknown provider type {type_name[:40]!r}"
                    f" (known: {', '.join(known_types())})"
                ) from None
            providers[name] = cls.from_config(name, instance, base)
            instance.done()
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
    )
