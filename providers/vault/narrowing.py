"""Whether a Vault request is covered by another of the parent session: same kind, and each list a subset.

A token's policies must be among the parent's (names compared lower-cased,
as Vault does) and its uses no more than the parent's (unlimited only under
an unlimited parent). A dynamic secret must use the parent's role; a
certificate's names must be among the parent's common name and alt names,
an SSH certificate's principals among the parent's. A ``kind: secret`` is
never covered: it goes only by the proxy, and a child's credentials are files.
"""

from __future__ import annotations

from providers.vault.dynamic import DynamicRequest, PkiRequest, SshRequest
from providers.vault.request import AnyVaultRequest, VaultRequest
from providers.vault.secret import SecretRequest


def vault_narrower(child: AnyVaultRequest, parent: AnyVaultRequest) -> list[str]:
    """Why ``child`` asks for more than ``parent`` has, each reason naming the widening key."""
    if isinstance(child, SecretRequest) or isinstance(parent, SecretRequest):
        # Only the proxy ever holds a KV secret's value; a child gets files, so it never gets this one.
        return ["kind: secret stays in its parent's proxy: it is never a child's file"]
    child_kind, parent_kind = _kind(child), _kind(parent)
    if child_kind != parent_kind:
        return [f"kind: {child_kind} where the parent's credential is {parent_kind}"]
    if isinstance(child, VaultRequest) and isinstance(parent, VaultRequest):
        return _token(child, parent)
    assert isinstance(child, DynamicRequest) and isinstance(parent, DynamicRequest)
    if child.role != parent.role:
        return [f"role: {child.role} is not the parent's role {parent.role}"]
    if isinstance(child, PkiRequest) and isinstance(parent, PkiRequest):
        names = {parent.common_name, *parent.alt_names}
        reasons = [] if child.common_name in names else [f"common_name: {child.common_name} is not one of the parent's"]
        reasons += [
            f"alt_names[{index}]: {name} is not one of the parent's names"
            for index, name in enumerate(child.alt_names)
            if name not in names
        ]
        return reasons
    if isinstance(child, SshRequest) and isinstance(parent, SshRequest):
        return [
            f"principals[{index}]: {principal} is not one of the parent's principals"
            for index, principal in enumerate(child.principals)
            if principal not in parent.principals
        ]
    return []


def _token(child: VaultRequest, parent: VaultRequest) -> list[str]:
    reasons = [
        f"policies[{index}]: {policy} is not one of the parent's policies"
        for index, policy in enumerate(child.policies)
        if policy not in parent.policies
    ]
    if parent.num_uses and not child.num_uses:
        reasons.append(f"num_uses: 0 (unlimited) is more than the parent's {parent.num_uses}")
    elif parent.num_uses and child.num_uses > parent.num_uses:
        reasons.append(f"num_uses: {child.num_uses} is more than the parent's {parent.num_uses}")
    return reasons


def _kind(request: AnyVaultRequest) -> str:
    return request.kind if isinstance(request, DynamicRequest) else "token"
