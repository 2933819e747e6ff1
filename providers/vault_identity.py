"""Session tokens must not carry the broker's Vault identity.

A token created as a child of the broker's login inherits its entity, and so
every policy the identity groups of that entity hold (``identity_policies``),
none of which show in the token's own ``policies``. Orphans (create-orphan,
or a token role with ``orphan=true``) inherit nothing. So each minted token
is looked up and checked.
"""

from __future__ import annotations

from typing import Any


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
