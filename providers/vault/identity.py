"""Session tokens must not carry the broker's Vault identity.

A token created as a child of the broker's login inherits its entity, and so
every policy the identity groups of that entity hold (``identity_policies``),
none of which show in the token's own ``policies``. Orphans (create-orphan,
or a token role with ``orphan=true``) inherit nothing. These are the checks:
one on each minted token, one in ``broker doctor`` on the broker's login.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.vocab.checks import Check
from broker.vocab.errors import BrokerError


def minted_problems(facts: dict[str, Any], policies: tuple[str, ...]) -> list[str]:
    """Why a token looked up by accessor carries more than ``policies`` (empty when it carries exactly that)."""
    problems = []
    entity = str(facts.get("entity_id") or "")
    if entity:
        problems.append(f"it carries entity {entity[:64]!r}, inherited from the broker's login")
    identity = sorted(str(p) for p in facts.get("identity_policies") or [])
    if identity:
        problems.append(f"it carries identity policies {identity}")
    granted = sorted(str(p) for p in facts.get("policies") or [])
    if granted != sorted(policies):
        problems.append(f"its policies are {granted}, not the requested {sorted(policies)}")
    if facts.get("orphan") is not True:
        problems.append("it is not an orphan (mint through an orphan=true token_role)")
    return problems


def entity_check(
    self_facts: dict[str, Any], token_role: str | None, read_role: Callable[[str], dict[str, Any]]
) -> Check:
    """Whether session tokens would inherit the entity of the broker's login (``self_facts``: its lookup-self)."""
    entity = str(self_facts.get("entity_id") or "")
    if not entity:
        return Check("entity", True, "the broker's login has no entity for session tokens to inherit")
    identity = ", ".join(sorted(str(p) for p in self_facts.get("identity_policies") or [])) or "none"
    held = f"the broker's login has entity {entity[:64]!r} (identity policies {identity})"
    if not token_role:
        return Check("entity", True, f"{held}; session tokens are orphans from create-orphan and do not inherit it")
    try:
        role = read_role(token_role)
    except BrokerError as exc:
        return Check(
            "entity",
            False,
            f"{held}; cannot tell whether token_role {token_role} makes orphans ({exc.message})",
            f"grant read on auth/token/roles/{token_role} in the broker's Vault policy",
        )
    if role.get("orphan") is True:
        return Check("entity", True, f"{held}; token role {token_role} makes orphans, which do not inherit it")
    return Check(
        "entity",
        False,
        f"{held} and token role {token_role} is not orphan=true: session tokens would inherit it,"
        " and the broker refuses them (every issue fails)",
        f"set orphan=true on token role {token_role}",
    )
