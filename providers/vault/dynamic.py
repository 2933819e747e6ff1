"""Vault dynamic secrets as credential kinds: what a manifest may ask for and what a policy grant allows.

A ``vault`` credential says ``kind: database`` (a PostgreSQL user per lease),
``pki`` (a short-lived X.509 certificate) or ``ssh`` (a signed SSH
certificate); ``token`` stays the default. The manifest names the engine's
role and, for certificates, the names it wants; a grant lists the roles
(``database_roles``, ``pki_roles``, ``ssh_roles``) and, for certificates, the
names they may carry (``common_names``, ``principals``). Anything a grant
does not list is denied. Minting lives in ``providers.vault.leases``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from broker.vocab.errors import ManifestError
from broker.vocab.fields import Fields
from broker.vocab.globs import any_match, glob_match
from providers.base import CredentialRequest

KINDS = ("token", "database", "pki", "ssh", "secret")
DYNAMIC_KINDS = KINDS[1:]  # each read or minted through its own secrets engine (``providers.vault.leases``)
ROLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
ROLE_GLOB = re.compile(r"[A-Za-z0-9_.*?-]{1,128}")
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
DNS_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")
DNS_GLOB = re.compile(r"(?=.{1,253}$)[a-z0-9*?](?:[a-z0-9*?.-]{0,252})")
#: A POSIX user name: SSH joins principals with commas, so nothing else may pass.
PRINCIPAL = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
PRINCIPAL_GLOB = re.compile(r"[a-z0-9_.*?-]{1,32}")
MAX_NAMES = 16


@dataclass(frozen=True)
class DynamicRequest(CredentialRequest):
    """A dynamic secret of one Vault secrets engine, through one of its roles."""

    role: str = ""

    kind = "dynamic"

    def scope(self) -> dict[str, Any]:
        return {"kind": self.kind, "role": self.role}

    def proxy_refusal(self) -> str | None:
        return "only a Vault token (kind: token) can be put in by the proxy"


@dataclass(frozen=True)
class DatabaseRequest(DynamicRequest):
    kind = "database"


@dataclass(frozen=True)
class PkiRequest(DynamicRequest):
    common_name: str = ""
    alt_names: tuple[str, ...] = ()

    kind = "pki"

    def scope(self) -> dict[str, Any]:
        return {**super().scope(), "common_name": self.common_name, "alt_names": list(self.alt_names)}


@dataclass(frozen=True)
class SshRequest(DynamicRequest):
    principals: tuple[str, ...] = ()

    kind = "ssh"

    def scope(self) -> dict[str, Any]:
        return {**super().scope(), "principals": list(self.principals)}


def parse_dynamic_request(fields: Fields, kind: str, *, name: str, provider: str, ttl: int | None) -> DynamicRequest:
    """The manifest keys of one dynamic kind (untrusted); ``done()`` refuses the token keys."""
    role = fields.req_string("role", pattern=ROLE_NAME, max_len=128, hint="letters, digits, '_', '.', '-'")
    if kind == "database":
        return DatabaseRequest(name=name, provider=provider, ttl=ttl, role=role)
    if kind == "pki":
        common_name = fields.req_string("common_name", pattern=DNS_NAME, max_len=253, hint="a lower-case DNS name")
        alt_names = fields.string_list(
            "alt_names", required=False, pattern=DNS_NAME, max_items=MAX_NAMES, max_len=253, hint="a DNS name"
        )
        return PkiRequest(
            name=name, provider=provider, ttl=ttl, role=role, common_name=common_name, alt_names=alt_names or ()
        )
    assert kind == "ssh"
    principals = fields.string_list(
        "principals", pattern=PRINCIPAL, max_items=MAX_NAMES, max_len=32, hint="a user name: [a-z_][a-z0-9_.-]*"
    )
    assert principals is not None
    return SshRequest(name=name, provider=provider, ttl=ttl, role=role, principals=principals)


def parse_kind(fields: Fields) -> str:
    kind = fields.string("kind", required=False, max_len=16) or "token"
    if kind not in KINDS:
        raise ManifestError(f"{fields.where('kind')}: must be one of {', '.join(KINDS)}")
    return kind


@dataclass(frozen=True)
class DynamicGrant:
    """The dynamic-secret part of a ``vault`` grant; empty lists grant nothing."""

    database_roles: tuple[str, ...] = ()
    pki_roles: tuple[str, ...] = ()
    common_names: tuple[str, ...] = ()
    ssh_roles: tuple[str, ...] = ()
    principals: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.database_roles or self.pki_roles or self.ssh_roles)

    def check(self, request: DynamicRequest) -> list[str]:
        roles = {"database": self.database_roles, "pki": self.pki_roles, "ssh": self.ssh_roles}[request.kind]
        reasons = []
        if not any_match(roles, request.role):
            reasons.append(f"vault {request.kind} role {request.role!r} is not granted ({request.kind}_roles)")
        if isinstance(request, PkiRequest):
            for dns_name in (request.common_name, *request.alt_names):
                if not any(dns_glob_match(pattern, dns_name) for pattern in self.common_names):
                    reasons.append(f"certificate name {dns_name!r} is not granted (common_names)")
        if isinstance(request, SshRequest):
            reasons.extend(
                f"ssh principal {principal!r} is not granted (principals)"
                for principal in request.principals
                if not any_match(self.principals, principal)
            )
        return reasons


def dns_glob_match(pattern: str, name: str) -> bool:
    """``*`` and ``?`` within one label: ``*.ci.internal`` covers ``a.ci.internal``, never ``a.b.ci.internal``."""
    wanted, labels = pattern.split("."), name.split(".")
    return len(wanted) == len(labels) and all(glob_match(p, label) for p, label in zip(wanted, labels, strict=True))


def compile_dynamic_grant(fields: Fields) -> DynamicGrant:
    def globs(key: str, pattern: re.Pattern[str], hint: str, max_len: int = 128) -> tuple[str, ...]:
        found = fields.string_list(key, required=False, pattern=pattern, max_items=100, max_len=max_len, hint=hint)
        return found or ()

    grant = DynamicGrant(
        database_roles=globs("database_roles", ROLE_GLOB, "a role name glob"),
        pki_roles=globs("pki_roles", ROLE_GLOB, "a role name glob"),
        common_names=globs("common_names", DNS_GLOB, "a lower-case DNS name glob", 253),
        ssh_roles=globs("ssh_roles", ROLE_GLOB, "a role name glob"),
        principals=globs("principals", PRINCIPAL_GLOB, "a user name glob", 32),
    )
    if grant.common_names and not grant.pki_roles:
        raise fields.fail("common_names", "only goes with pki_roles")
    if grant.principals and not grant.ssh_roles:
        raise fields.fail("principals", "only goes with ssh_roles")
    return grant
