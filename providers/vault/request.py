"""What a Vault manifest entry, a Vault grant and the engine keys of a ``[providers.*]`` table say, parsed and checked.

Nothing here talks to Vault: ``providers.vault.provider`` mints and revokes
with what these return. Policy names are compared lower-cased, as Vault and OpenBao
compare them (``ROOT`` is root), and the root policy is never issued. The
dynamic-secret kinds are parsed in ``providers.vault.dynamic``, ``kind:
secret`` (a KV v2 field only the proxy holds) in ``providers.vault.secret``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from broker.vocab.errors import ManifestError
from broker.vocab.fields import Fields
from broker.vocab.globs import any_match
from providers.base import CredentialRequest, Grant
from providers.vault.dynamic import (
    DYNAMIC_KINDS,
    DynamicGrant,
    DynamicRequest,
    compile_dynamic_grant,
    parse_dynamic_request,
    parse_kind,
)
from providers.vault.secret import SecretGrant, SecretRequest, compile_secret_grant, parse_secret_request

POLICY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
POLICY_GLOB = re.compile(r"[A-Za-z0-9_.*?-]{1,128}")
MAX_USES = 1_000_000
FORBIDDEN_POLICIES = frozenset({"root"})
MOUNT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}){0,3}")
HINT_HOST = re.compile(r"[A-Za-z0-9.:\[\]-]{1,253}|/[A-Za-z0-9_./-]{0,255}")
HINT_DATABASE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}")


@dataclass(frozen=True)
class VaultRequest(CredentialRequest):
    policies: tuple[str, ...] = ()
    num_uses: int = 0

    def scope(self) -> dict[str, Any]:
        return {"policies": list(self.policies), "num_uses": self.num_uses}


AnyVaultRequest = VaultRequest | DynamicRequest  # a token, a dynamic secret (database, pki, ssh), a KV secret


@dataclass(frozen=True)
class VaultGrant(Grant[AnyVaultRequest]):
    policies: tuple[str, ...] = ()
    max_uses: int | None = None
    dynamic: DynamicGrant = field(default_factory=DynamicGrant)
    secret: SecretGrant = field(default_factory=SecretGrant)

    def check(self, request: AnyVaultRequest) -> list[str]:
        if isinstance(request, SecretRequest):
            return self.secret.check(request)
        if isinstance(request, DynamicRequest):
            return self.dynamic.check(request)
        if not self.policies:
            return ["this grant names no vault policies (policies)"]
        reasons = [f"vault policy {p!r} is not granted" for p in request.policies if not any_match(self.policies, p)]
        if self.max_uses is not None:
            if request.num_uses == 0:
                reasons.append(f"num_uses 0 (unlimited) is above the grant's max_uses {self.max_uses}")
            elif request.num_uses > self.max_uses:
                reasons.append(f"num_uses {request.num_uses} is above the grant's max_uses {self.max_uses}")
        return reasons


def parse_vault_request(fields: Fields, *, name: str, provider: str, ttl: int | None) -> VaultRequest | DynamicRequest:
    """A manifest entry of a vault provider: a token with its policies, or a dynamic secret."""
    kind = parse_kind(fields)
    if kind == "secret":
        return parse_secret_request(fields, name=name, provider=provider, ttl=ttl)
    if kind != "token":
        return parse_dynamic_request(fields, kind, name=name, provider=provider, ttl=ttl)
    policies = fields.string_list(
        "policies",
        pattern=POLICY_NAME,
        max_items=64,
        max_len=128,
        hint="letters, digits, '_', '.', '-'",
    )
    assert policies is not None
    # Vault and OpenBao lower-case policy names ("ROOT" is root), so the broker compares them lower-cased too.
    policies = tuple(policy.lower() for policy in policies)
    for index, policy in enumerate(policies):
        if policy in FORBIDDEN_POLICIES:
            raise ManifestError(f"{fields.where(f'policies[{index}]')}: the root policy is never issued")
        if policy in policies[:index]:
            raise ManifestError(f"{fields.where(f'policies[{index}]')}: {policy!r} is listed twice")
    num_uses = fields.integer("num_uses", minimum=0, maximum=MAX_USES) or 0
    return VaultRequest(name=name, provider=provider, ttl=ttl, policies=policies, num_uses=num_uses)


def compile_vault_grant(fields: Fields, *, provider: str, max_ttl: int | None) -> VaultGrant:
    """A policy grant for a vault provider: policy globs, max_uses, the dynamic-secret roles, the KV secrets."""
    policies = fields.string_list(
        "policies", required=False, pattern=POLICY_GLOB, max_items=100, hint="a policy name glob"
    )
    policies = tuple(pattern.lower() for pattern in policies or ())  # compared with lower-cased names
    max_uses = fields.integer("max_uses", minimum=1, maximum=MAX_USES)
    dynamic = compile_dynamic_grant(fields)
    secret = compile_secret_grant(fields)
    if not policies and dynamic.empty and not secret.paths:
        raise fields.fail("policies", "required (or database_roles, pki_roles, ssh_roles, secret_paths)")
    return VaultGrant(
        provider=provider, max_ttl=max_ttl, policies=policies, max_uses=max_uses, dynamic=dynamic, secret=secret
    )


def dynamic_config(fields: Fields) -> dict[str, Any]:
    """Mount paths of the dynamic-secret engines, the lease holder's policies, the libpq hints."""
    mounts = {}
    for kind in DYNAMIC_KINDS:
        mount = fields.string(f"{kind}_mount", required=False, pattern=MOUNT, max_len=256, hint="a mount path")
        if mount is not None:
            mounts[kind] = mount
    policies = fields.string_list(
        "dynamic_policies", required=False, pattern=POLICY_NAME, max_items=16, hint="a Vault policy name"
    )
    hints = {}
    host = fields.string("database_hint_host", required=False, pattern=HINT_HOST, max_len=256, hint="a host name")
    port = fields.integer("database_hint_port", minimum=1, maximum=65535)
    database = fields.string("database_hint_database", required=False, pattern=HINT_DATABASE, hint="a database name")
    for name, value in (("PGHOST", host), ("PGPORT", port), ("PGDATABASE", database)):
        if value is not None:
            hints[name] = str(value)
    return {"mounts": mounts, "dynamic_policies": policies or (), "database_hints": hints}
