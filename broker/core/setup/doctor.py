"""``broker doctor``: is this installation ready to issue? One check per line; no credential is minted.

The checks, in order: the config parses (when it does not, that is the only
check), the policy files lint, runtime_dir can hold secrets, state_dir is
writable with ``[audit] min_free`` free for new issues, the signing and
fingerprint keys are present and private, the issuer's key signs (``[identity]``: the
providers that sign with it are handed the issuer first; the tokens the checks
sign are logged once the installation has a log), then each provider instance's own
``health`` checks (login, permissions, clock) with the broker's own
identity and, once it logs in, what the policy's grants on it need
(``grant_health``: Vault's dynamic kinds ask a probe lease holder, 60 s
and no lease, revoked at once), then the deny budget of every role with live sessions in the store
(AWS ``deny-policy``: a failed check once another revocation would not fit).
A provider failure is a failed check, never an exception. Nothing here prints
or exits; nothing here creates a file or a directory (the session store is
only opened when it exists).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from broker.audit.keys import MIGRATE_HINT, load_fingerprint_keys, load_signing_keys
from broker.audit.witness import object_lock_enabled
from broker.core.broker import Broker, hand_issuer
from broker.core.identity.issuer import Issuer, check_issuer_key
from broker.core.inputs.config import Config, load_config
from broker.core.inputs.policy import load_policy
from broker.core.setup.install import POLICY_EXAMPLE_NAME
from broker.core.status import deny_budgets
from broker.core.store import has_store, open_config_store, shared_store_checks, state_room
from broker.host import mounts
from broker.host.sessiondir import prepare_runtime_dir
from broker.vocab.checks import Check
from broker.vocab.errors import REPORT_URL, BrokerError
from broker.vocab.sizes import format_size
from broker.vocab.time import parse_iso, utcnow
from providers.base import Grant, Provider
from providers.capabilities import ChecksGrants, DenyBudget

KEY_MODES = (0o400, 0o600)


@dataclass(frozen=True)
class DoctorReport:
    config: Path
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "config": str(self.config), "checks": [c.to_json() for c in self.checks]}


def run_doctor(path: Path, more: Callable[[Config], list[Check]] | None = None) -> DoctorReport:
    """Every check of the installation; ``more`` adds checks of the layers above the core (the daemon)."""
    try:
        config = load_config(path)
    except BrokerError as exc:
        where = "run broker init, or point --config / BROKER_CONFIG at the config file"
        fix = where if not os.path.lexists(path) else "correct it (broker init --dir DIR writes a commented example)"
        return DoctorReport(path, (Check("config", False, exc.message, fix),))
    opened: Broker | None = None
    try:
        checks = [
            check_config(config),
            check_policy(config),
            check_runtime_dir(config),
            check_state_dir(config),
            check_audit_key(config),
            check_fingerprint_key(config),
            *shared_store_checks(config),
            *check_witness(config),
        ]
        if config.identity is not None:
            opened, issuer = _issuer(config, checks)
            checks.append(check_identity(issuer))
        checks += [
            *check_providers(config),
            *check_deny_budgets(config),
            *(more(config) if more is not None else []),
        ]
    finally:
        if opened is not None:
            with contextlib.suppress(Exception):
                opened.close()  # its checkpoint signs the tokens the checks logged
        for provider in config.providers.values():
            with contextlib.suppress(Exception):
                provider.close()
    return DoctorReport(path, tuple(checks))


def check_config(config: Config) -> Check:
    names = ", ".join(config.providers) or "none"
    detail = f"{config.path} (providers: {names})"
    try:
        mode = stat.S_IMODE(os.stat(config.path).st_mode)
    except OSError as exc:
        return Check("config", False, f"{config.path}: {exc.strerror}", "make the config file readable")
    if mode & 0o022:
        return Check("config", False, f"{config.path} is writable by group or others (mode {mode:04o})", "chmod 644")
    return Check("config", True, detail)


def check_policy(config: Config) -> Check:
    directory = config.policy_dir
    try:
        policy = load_policy(directory, config)
    except BrokerError as exc:
        if not directory.is_dir():
            fix = f"run broker init, or create {directory} with your policy files"
        elif not any(p.suffix in (".yaml", ".yml") for p in directory.iterdir()):
            example = directory / POLICY_EXAMPLE_NAME
            start = f"copy {example} to default.yaml once the providers it names exist, or " if example.exists() else ""
            fix = f"{start}write a policy file there; then broker policy lint"
        else:
            fix = "correct the file it names (broker policy lint shows the same error)"
        return Check("policy", False, exc.message, fix)
    return Check("policy", True, f"{len(policy.rules)} rule(s) in {len(policy.files)} file(s) in {directory}")


def check_runtime_dir(config: Config) -> Check:
    path = config.runtime_dir
    if not os.path.lexists(path):
        return Check("runtime_dir", False, f"{path} does not exist", f"run broker init, or mkdir -m 0711 {path}")
    try:
        runtime = prepare_runtime_dir(path, config.mount_tmpfs)
    except BrokerError as exc:
        if "tmpfs" in exc.message:
            fix = (
                'run the broker as root with CAP_SYS_ADMIN and mount_tmpfs = "auto" (a tmpfs per session),'
                f" or mount one there: mount -t tmpfs -o mode=0711,size=64m tmpfs {path}"
            )
        else:
            fix = f"make {path} a directory owned by uid {os.geteuid()}, mode 0711, with no world-writable parent"
        return Check("runtime_dir", False, exc.message, fix)
    if not runtime.mount_per_session:
        return Check("runtime_dir", True, f"{path} (it is on tmpfs)")
    return Check("runtime_dir", True, f"{path} (a tmpfs is mounted per session, {_noswap_note()})")


def _noswap_note() -> str:
    accepted = mounts.tmpfs_accepts(mounts.NOSWAP)
    if accepted:
        return "with noswap: its pages never reach swap"
    if accepted is False:
        return "without noswap: this kernel (before Linux 6.4) refuses it, so its pages can reach swap"
    return "noswap support could not be checked"


def check_state_dir(config: Config) -> Check:
    path = config.state_dir
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return Check("state_dir", False, f"{path} does not exist", f"run broker init, or mkdir -m 0700 {path}")
    except OSError as exc:
        return Check("state_dir", False, f"{path}: {exc.strerror}", "make it a directory the broker can write")
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISDIR(info.st_mode):
        return Check("state_dir", False, f"{path} is not a directory", "remove it, then run broker init")
    if info.st_uid != os.geteuid():
        fix = f"chown {os.geteuid()} {path}"
        return Check("state_dir", False, f"{path} is owned by uid {info.st_uid}, not the broker's", fix)
    if mode & 0o022:
        return Check("state_dir", False, f"{path} is writable by group or others (mode {mode:04o})", "chmod 700 it")
    if not os.access(path, os.W_OK | os.X_OK):
        return Check("state_dir", False, f"{path} is not writable by the broker", "make it writable (read-only mount?)")
    room = state_room(config)
    if room is None or room.min_free == 0:
        return Check("state_dir", True, f"{path} (mode {mode:04o}, writable)")
    free, missing = room.free(), max(0, room.reserve_bytes - room.reserved())  # read only: nothing is allocated
    if free - missing < room.min_free:
        needs = f"[audit] min_free ({format_size(room.min_free)})" + (" and the reserve" if missing else "")
        fix = "free space there, or lower [audit] min_free: until then no session is issued"
        return Check("state_dir", False, f"{path} has {format_size(free)} free, less than {needs}", fix)
    return Check("state_dir", True, f"{path} (mode {mode:04o}, writable, {format_size(free)} free)")


def check_audit_key(config: Config) -> Check:
    return _check_key_file("audit_key", config.audit_key, lambda path: load_signing_keys(path).key_id)


def check_fingerprint_key(config: Config) -> Check:
    return _check_key_file("fingerprint_key", config.fingerprint_key, lambda path: load_fingerprint_keys(path).key_id)


def _check_key_file(name: str, path: Path, load: Callable[[Path], str]) -> Check:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return Check(name, False, f"{path} does not exist", "run broker init (it creates the key, mode 0400)")
    except OSError as exc:
        return Check(name, False, f"{path}: {exc.strerror}", "make it readable by the broker")
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISREG(info.st_mode):
        return Check(name, False, f"{path} is not a regular file", "restore the key file from a backup")
    if info.st_uid != os.geteuid():
        return Check(name, False, f"{path} is owned by uid {info.st_uid}", f"chown {os.geteuid()} {path}")
    if mode not in KEY_MODES:
        return Check(name, False, f"{path} has mode {mode:04o}, not 0400 or 0600", f"chmod 400 {path}")
    try:
        key_id = load(path)
    except BrokerError as exc:
        fix = "broker audit migrate-keys" if MIGRATE_HINT in exc.message else "restore the key file from a backup"
        return Check(name, False, exc.message, fix)
    return Check(name, True, f"{path} (mode {mode:04o}, key id {key_id})")


def check_witness(config: Config) -> list[Check]:
    """The witness bucket has Object Lock, and no checkpoint waits for it longer than it should."""
    witness = config.witness
    if witness is None or not config.state_dir.is_dir():
        return []
    checks: list[Check] = []
    try:
        locked = object_lock_enabled(witness)
        checks.append(
            Check("witness.bucket", True, f"{witness.url} (Object Lock enabled)")
            if locked
            else Check(
                "witness.bucket", False, f"{witness.url}: Object Lock is not enabled", "use a bucket made with it"
            )
        )
    except Exception as exc:  # botocore's errors: a failed line, never a traceback
        text = " ".join(str(exc).split())[:200]
        checks.append(Check("witness.bucket", False, f"{witness.url}: {type(exc).__name__}: {text}", "check [audit]"))
    store = open_config_store(config)
    try:
        pending, status = store.witness_pending(), store.witness_status()
    finally:
        store.close()
    if not pending:
        checks.append(
            Check("witness.lag", True, f"every checkpoint witnessed (last write {status['last_success_at']})")
        )
        return checks
    oldest_seq, _, _, created = pending[0]
    age = (utcnow() - parse_iso(created)).total_seconds()
    behind = witness.interval == 0 or age > 2 * witness.interval
    detail = f"{len(pending)} checkpoint(s) not witnessed yet, the oldest (seq {oldest_seq}) for {int(age)} s"
    if status["last_error"]:
        detail += f"; last error: {status['last_error']}"
    checks.append(
        Check("witness.lag", not behind, detail, "" if not behind else "restore access; broker sweep retries")
    )
    return checks


def _issuer(config: Config, checks: list[Check]) -> tuple[Broker | None, Issuer]:
    """The issuer, handed to the providers that sign with it: logging to the installation's log when it has one
    (a broker opened on it, nothing created), else logging nothing (nothing was ever issued here)."""
    ready = all(check.ok for check in checks if check.name in ("state_dir", "audit_key", "fingerprint_key"))
    opened = None
    if ready and has_store(config):
        with contextlib.suppress(BrokerError):
            opened = Broker.open(config)
    issuer = opened.issuer if opened is not None and opened.issuer is not None else Issuer.of(config, None, "doctor")
    hand_issuer(config, issuer)
    return opened, issuer


def check_identity(issuer: Issuer) -> Check:
    """The issuer's key is there and signs (made on first use when absent: the first token makes it, not this)."""
    path = issuer.settings.signing_key_file
    if issuer.settings.transit_key is None and not os.path.lexists(path):
        return Check("identity.key", True, f"{issuer.issuer}: {path} is made (0600) when the first token is signed")
    try:
        detail = check_issuer_key(issuer)
    except BrokerError as exc:
        return Check("identity.key", False, exc.message, "see the error; broker identity rotate-key makes a new key")
    return Check("identity.key", True, f"{issuer.issuer} signs with {detail}")


def check_providers(config: Config) -> list[Check]:
    if not config.providers:
        return [Check("providers", False, "no provider configured", f"fill a [providers.*] table in {config.path}")]
    try:
        grants = [grant for rule in load_policy(config.policy_dir, config).rules for grant in rule.grants]
    except BrokerError:
        grants = []  # the policy check says why
    checks: list[Check] = []
    for name, provider in config.providers.items():
        mine = [grant for grant in grants if grant.provider == name]
        for check in _health(provider, mine):
            fallback = f"check [providers.{name}] in {config.path} and that the provider is reachable"
            fix = "" if check.ok else check.fix or fallback
            checks.append(replace(check, name=f"providers.{name}.{check.name}", fix=fix))
    return checks


def _health(provider: Provider[Any], grants: list[Grant[Any]]) -> list[Check]:
    try:
        results = provider.health()
        logged_in = not any(c.name == "login" and not c.ok for c in results)
        if logged_in and isinstance(provider, ChecksGrants):  # what the granted credentials need
            results += provider.grant_health(grants)
    except BrokerError as exc:
        return [Check("health", False, exc.message)]
    except Exception as exc:  # a bug in a health check: a failed line, never a traceback
        return [Check("health", False, f"unexpected {type(exc).__name__}; please report it at {REPORT_URL}")]
    return results or [Check("health", True, f"not checked: {provider.type_name} has no health checks")]


def check_deny_budgets(config: Config) -> list[Check]:
    """One check per role that live sessions in the store revoke into (nothing without a store)."""
    if not config.providers or not has_store(config):
        return []
    now = datetime.now(UTC)
    try:
        store = open_config_store(config)
        try:
            records = [c for name in config.providers for c in store.live_credentials(name, now)]
            budgets = deny_budgets(store, config.providers, records, now)
        finally:
            store.close()
    except BrokerError as exc:
        return [Check("deny_budgets", False, exc.message, "check state_dir and its sessions.db")]
    return [_budget_check(name, budget) for (name, _), budget in sorted(budgets.items())]


def _budget_check(provider: str, budget: DenyBudget) -> Check:
    role = budget.role.rsplit("/", 1)[-1]
    name = f"providers.{provider}.deny_budget.{role}"
    if budget.error or budget.used is None or budget.reserved is None:
        fix = f"let the broker's identity call iam:GetRole, iam:ListRolePolicies and iam:GetRolePolicy on {role}"
        return Check(name, False, f"role {budget.role}: {budget.error}", fix)
    detail = (
        f"role {budget.role}: {budget.live_sessions} live session(s); {budget.used} of {budget.limit} characters"
        f" of inline policies in use, {budget.reserved} once every live session is revoked"
    )
    if budget.full:
        fix = (
            "no room to revoke another session, so new issues on this role are denied until sessions expire;"
            " shrink the role's other inline policies or spread tasks over more roles"
        )
        return Check(name, False, detail, fix)
    return Check(name, True, detail)
