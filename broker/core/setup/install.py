"""``broker init``: a fresh installation's config, example policy, audit keys and directories.

Nothing is overwritten without ``force``, and an existing audit key is never
regenerated, not even with ``force`` (that would orphan every checkpoint it
signed; ``broker audit rotate-key`` is the way to replace it); the same holds
for the fingerprint key (regenerating it would hide every fingerprint from
``audit lookup``). Every file
that would be refused is checked before anything is written. The example
policy is written as ``default.yaml.example``, which the broker does not load
(only ``*.yaml``/``*.yml`` are): it grants provider ``vault``, and a policy
naming a provider the config lacks fails ``broker policy lint`` and ``broker
doctor``. Nothing here prints or exits.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from broker.audit.keys import load_fingerprint_keys, load_or_create_keys, load_signing_keys
from broker.core.inputs.directories import check_own_directory
from broker.vocab.errors import BadInput, ConfigError
from broker.vocab.files import write_private_file
from providers.registry import provider_classes

EXAMPLE_TABLE = re.compile(r"^# \[providers\.([a-z0-9_-]+)\]$", re.MULTILINE)
CONFIG_NAME = "broker.toml"
POLICY_EXAMPLE_NAME = "default.yaml.example"
DIR_MODE = 0o755
CONFIG_MODE = 0o644
POLICY_MODE = 0o644
STATE_MODE = 0o700
RUNTIME_MODE = 0o711

#: The repository's ``policies/default.yaml``, verbatim (a test keeps them equal).
DEFAULT_POLICY = """\
# A conservative starting point: read-only Vault access for tasks named
# "fix-*" requested by the `ci` user, for at most 15 minutes and 50 uses,
# with the session files owned by uid/gid 1000.
# Everything else is denied (the broker denies by default). Copy it to your
# policy_dir (`broker init` does) and widen it one grant at a time.

rules:
  - id: ci-read-only
    description: CI-launched agents may read CI secrets for a short while
    tasks: ["fix-*"]
    requesters: ["ci"]
    max_ttl: 15m
    sandbox_uids: [1000]        # the sandbox user that owns the session files
    sandbox_gids: [1000]
    grants:
      - provider: vault
        policies: ["ci-read"]
        max_uses: 50
"""

CONFIG_TEMPLATE = """\
# Scoped-credential broker configuration, written by `broker init`.
# Every field is described in SPEC.md, "Operator configuration"; check the
# whole installation with `broker doctor`. Relative paths are taken relative
# to this file's directory. This file holds no secrets (mode 0644); the
# broker's own secret files it names must be mode 0600 or stricter.

# Session store and issuance log (persistent disk; no secrets here).
state_dir = {state_dir}
# Per-session tmpfs directories: the credentials live here, never on a disk.
runtime_dir = {runtime_dir}
# Policy files: every *.yaml / *.yml here is loaded; the broker denies by default.
policy_dir = {policy_dir}
# The Ed25519 key that signs the issuance log's checkpoints (created 0400).
audit_key = {audit_key}
# The HMAC key of credential fingerprints; audit lookup needs only this one (created 0400).
fingerprint_key = {fingerprint_key}
# Session lifetime when a manifest names none, and the ceiling on any lifetime.
default_ttl = "30m"
max_ttl = "12h"
# "auto": a tmpfs per session when the broker may mount (root with CAP_SYS_ADMIN),
# otherwise runtime_dir must itself be on tmpfs; "always"; "never": runtime_dir
# must itself be on tmpfs.
# mount_tmpfs = "auto"

# The broker as an OpenID Connect issuer (docs/identity.md): session tokens
# (provider: identity), AWS web identity, Vault's jwt login, token exchange.
# [identity]
# issuer = "https://broker.example.com"   # https: verifiers fetch its keys there
# signing_key_file = "identity.key"       # beside audit_key, created 0600 on first use; or:
# transit_key = "broker-issuer"           # a Vault transit key (ecdsa-p256) that never leaves Vault

# Providers. Uncomment a table, fill it in, then run `broker doctor`. The
# table's name ({instances}) is the instance name that manifests and
# policies use; several instances of one type may exist under other names.

{providers}
"""


@dataclass(frozen=True)
class InitOptions:
    directory: Path
    state_dir: Path
    runtime_dir: Path
    force: bool = False


@dataclass(frozen=True)
class InitStep:
    """One thing ``init`` did: ``action`` is created, overwritten or kept."""

    path: Path
    action: str
    what: str

    def to_json(self) -> dict[str, str]:
        return {"path": str(self.path), "action": self.action, "what": self.what}


@dataclass(frozen=True)
class InitResult:
    config: Path
    policy_example: Path
    steps: tuple[InitStep, ...]


def render_config(directory: Path, state_dir: Path, runtime_dir: Path) -> str:
    """The commented config ``init`` writes (loads with no provider enabled): each provider type's example table."""
    examples = [cls.manual().example for cls in provider_classes()]
    instances = [match.group(1) for text in examples for match in EXAMPLE_TABLE.finditer(text)]
    return CONFIG_TEMPLATE.format(
        instances=", ".join(instances),
        providers="\n\n".join(examples),
        state_dir=_toml_string(state_dir),
        runtime_dir=_toml_string(runtime_dir),
        policy_dir=_toml_string(directory / "policies"),
        audit_key=_toml_string(directory / "audit.key"),
        fingerprint_key=_toml_string(directory / "fingerprint.key"),
    )


def initialise(options: InitOptions) -> InitResult:
    directory = options.directory.absolute()
    state_dir = check_own_directory("--state-dir", options.state_dir.absolute())
    runtime_dir = check_own_directory("--runtime-dir", options.runtime_dir.absolute())
    config, policies = directory / CONFIG_NAME, directory / "policies"
    example, audit_key = policies / POLICY_EXAMPLE_NAME, directory / "audit.key"
    fingerprint_key = directory / "fingerprint.key"
    for path in (config, example):
        if os.path.lexists(path) and not options.force:
            raise BadInput(f"{path} already exists; use --force to overwrite it (the audit key is always kept)")
        if os.path.islink(path):
            raise BadInput(f"{path} is a symbolic link; remove it first")
    existing_key = load_signing_keys(audit_key) if os.path.lexists(audit_key) else None
    existing_fingerprint = load_fingerprint_keys(fingerprint_key) if os.path.lexists(fingerprint_key) else None
    steps = [
        _directory(directory, DIR_MODE, "config directory"),
        _write(config, render_config(directory, state_dir, runtime_dir), CONFIG_MODE, "config, no provider yet"),
        _directory(policies, DIR_MODE, "policy directory"),
        _write(example, DEFAULT_POLICY, POLICY_MODE, "example policy, not loaded until renamed to default.yaml"),
    ]
    keys = load_or_create_keys(audit_key, fingerprint_key)
    for path, existing, key_id, what in (
        (audit_key, existing_key, keys.signing.key_id, "checkpoint signing key"),
        (fingerprint_key, existing_fingerprint, keys.fingerprints.key_id, "fingerprint key"),
    ):
        if existing is not None:
            steps.append(InitStep(path, "kept", f"{what}, key id {key_id}; never regenerated"))
        else:
            steps.append(InitStep(path, "created", f"{what}, mode 0400, key id {key_id}"))
    steps.append(_directory(state_dir, STATE_MODE, "state directory"))
    steps.append(_directory(runtime_dir, RUNTIME_MODE, "runtime directory"))
    return InitResult(config=config, policy_example=example, steps=tuple(steps))


def _toml_string(path: Path) -> str:
    return json.dumps(str(path))  # a JSON string is a valid TOML basic string


def _directory(path: Path, mode: int, what: str) -> InitStep:
    """Create ``path`` with exactly ``mode`` (parents 0755); an existing directory is kept as it is."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None
    if info is not None:
        if not stat.S_ISDIR(info.st_mode):
            raise ConfigError(f"{path} exists and is not a directory")
        return InitStep(path, "kept", f"{what}, mode {stat.S_IMODE(info.st_mode):04o}")
    try:
        os.makedirs(path.parent, mode=DIR_MODE, exist_ok=True)
        os.mkdir(path, mode)
        os.chmod(path, mode)  # whatever the umask
    except OSError as exc:
        raise ConfigError(f"cannot create {path}: {exc.strerror}") from None
    return InitStep(path, "created", f"{what}, mode {mode:04o}")


def _write(path: Path, text: str, mode: int, what: str) -> InitStep:
    """Write ``path`` atomically with exactly ``mode`` (a temporary file renamed into place)."""
    action = "overwritten" if os.path.lexists(path) else "created"
    try:
        write_private_file(path.parent, path.name, text.encode("utf-8"), mode=mode, durable=True)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None
    return InitStep(path, action, f"{what}, mode {mode:04o}")
