"""``broker doctor``'s checks of the dynamic-secret kinds a policy grants on one Vault instance.

A database user or a certificate is asked for by its lease holder, whose
Vault policies are ``dynamic_policies``, not the broker's; so the check
creates a probe holder exactly as ``issue`` would (through ``token_role``,
with ``dynamic_policies``; plus the default policy, for
``sys/capabilities-self`` alone; 60 s, no lease, revoked at once) and asks
Vault what it may do on ``<mount>/creds/<role>`` and ``<mount>/issue/<role>``
for every role the grants name. SSH certificates are signed with the
broker's own token, so ``<mount>/sign/<role>`` is asked of that, and each
granted SSH role (a glob: every role it matches, listed) is read to see that
it sets ``allow_user_key_ids``, which the certificates' key ids need. A role
glob is asked as the literal path: only a Vault policy path with the same or
a wider glob covers every role the grant allows. One line per kind, with a fix.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from broker.vocab.checks import Check
from broker.vocab.errors import BrokerError
from broker.vocab.globs import any_match
from providers.vault.dynamic import DynamicGrant
from providers.vault.leases import Engines, as_holder, create_holder, key_id_fix

if TYPE_CHECKING:
    import hvac

#: Per kind: the engine path under its mount, the capability it needs, whether the lease holder asks.
PATHS = {"database": ("creds", "read", True), "pki": ("issue", "update", True), "ssh": ("sign", "update", False)}
PROBE_TTL = 60
#: What Vault answered per path, or why it could not be asked and what to do (a fix, or "").
Answer = dict[str, set[str]] | tuple[str, str]


def dynamic_checks(engines: Engines, grants: Sequence[DynamicGrant]) -> list[Check]:
    paths = {}
    for kind, (under, _, _) in PATHS.items():
        roles = sorted({role for grant in grants for role in getattr(grant, f"{kind}_roles")})
        if roles:
            paths[kind] = [f"{engines.mounts[kind]}/{under}/{role}" for role in roles]
    held = [path for kind, found in paths.items() if PATHS[kind][2] for path in found]
    holder: Answer = _ask_holder(engines, held) if held else {}
    broker: Answer = _ask(engines, engines.vault.client(), paths["ssh"], "the broker's token") if "ssh" in paths else {}
    lines = [_line(engines, kind, found, holder if PATHS[kind][2] else broker) for kind, found in paths.items()]
    ssh_roles = sorted({role for grant in grants for role in grant.ssh_roles})
    return [_key_ids(engines, line, ssh_roles) if line.name == "dynamic.ssh" and line.ok else line for line in lines]


def _key_ids(engines: Engines, line: Check, roles: list[str]) -> Check:
    """The SSH line, failed when a granted role does not set allow_user_key_ids (or noting what was unreadable)."""
    mount, client = engines.mounts["ssh"], engines.vault.client()
    names, unread = [role for role in roles if not any(c in role for c in "*?")], []
    if len(names) < len(roles):  # globs: the roles they match
        try:
            with engines.vault.errors(f"list {mount}/roles"):
                listed = ((client.list(f"{mount}/roles") or {}).get("data") or {}).get("keys") or []
            names += [str(name) for name in listed if any_match(tuple(roles), str(name))]
        except BrokerError:
            unread.append(f"{mount}/roles (list)")
    lacking = []
    for name in sorted(set(names)):
        try:
            with engines.vault.errors(f"read {mount}/roles/{name}"):
                role = (client.read(f"{mount}/roles/{name}") or {}).get("data")
        except BrokerError:
            unread.append(f"{mount}/roles/{name}")
            continue
        if isinstance(role, dict) and role.get("allow_user_key_ids") is not True:
            lacking.append(name)
    paths = ", ".join(f"{mount}/roles/{name}" for name in (lacking or sorted(set(names))))
    if lacking:
        return Check(line.name, False, f"allow_user_key_ids is not set on {paths}", key_id_fix(engines, lacking[0]))
    if unread:
        detail = f"allow_user_key_ids not checked: the broker's token may not read {', '.join(unread)}"
        return replace(line, detail=f"{line.detail}; {detail}")
    return replace(line, detail=f"{line.detail}; allow_user_key_ids is set on {paths}") if names else line


def _ask_holder(engines: Engines, paths: list[str]) -> Answer:
    if not engines.dynamic_policies:
        return (
            "dynamic_policies is not set",
            f"set dynamic_policies in [providers.{engines.name}]:"
            " the Vault policies of the token that holds the leases",
        )
    try:
        holder, accessor = create_holder(engines, {"broker_probe": "doctor"}, PROBE_TTL, "broker-doctor", probe=True)
    except BrokerError as exc:
        token_role = engines.vault.token_role
        role = f"token role {token_role!r}" if token_role else "the broker's token"
        return (
            f"the lease holder cannot be created ({exc.message})",
            f"let {role} grant {', '.join(engines.dynamic_policies)} (allowed_policies), as issue needs",
        )
    try:
        return _ask(engines, as_holder(engines, holder), paths, "the lease holder")
    finally:
        with contextlib.suppress(BrokerError):  # otherwise it dies within PROBE_TTL seconds, holding no lease
            engines.vault.revoke_accessor(accessor)


def _ask(engines: Engines, client: hvac.Client, paths: list[str], who: str) -> Answer:
    try:
        with engines.vault.errors(f"capabilities-self of {who}"):
            answer = client.sys.get_capabilities(paths=paths)
    except BrokerError as exc:
        return exc.message, ""
    table = answer.get("data") if isinstance(answer.get("data"), dict) else answer
    return {path: set(table.get(path) or []) for path in paths}


def _line(engines: Engines, kind: str, paths: list[str], answer: Answer) -> Check:
    name = f"dynamic.{kind}"
    if isinstance(answer, tuple):
        return Check(name, False, *answer)
    _, capability, held = PATHS[kind]
    missing = [path for path in paths if "deny" in answer[path] or not answer[path] & {capability, "root"}]
    owner = "the lease holder (dynamic_policies)" if held else "the broker's token"
    if not missing:
        return Check(name, True, f"{owner} may {capability} {', '.join(paths)}")
    where = f"dynamic_policies ({', '.join(engines.dynamic_policies)})" if held else "the broker's policy"
    return Check(
        name,
        False,
        f"{owner} lacks {capability} on {', '.join(missing)}",
        f'add path "{missing[0]}" {{ capabilities = ["{capability}"] }} (and any other named) to {where},'
        " or take the role out of the policy's grants",
    )
