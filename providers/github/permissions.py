"""GitHub App permission names and levels, as the official ``app-permissions`` schema lists them.

``PERMISSIONS`` was generated once from ``components/schemas/app-permissions``
of ``tests/contracts/github-app-api.json`` (rest-api-description commit
0000036e42b5e7121c2b1ac244cb7bba1d2f3914); a test compares it with the
contract so it cannot drift. Levels order as none < read < write < admin.
"""

from __future__ import annotations

from types import MappingProxyType

LEVELS: tuple[str, ...] = ("none", "read", "write", "admin")
_RANK = {level: rank for rank, level in enumerate(LEVELS)}

PERMISSIONS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {
        "actions": ("read", "write"),
        "administration": ("read", "write"),
        "artifact_metadata": ("read", "write"),
        "attestations": ("read", "write"),
        "checks": ("read", "write"),
        "code_quality": ("read", "write"),
        "codespaces": ("read", "write"),
        "contents": ("read", "write"),
        "dependabot_secrets": ("read", "write"),
        "deployments": ("read", "write"),
        "discussions": ("read", "write"),
        "environments": ("read", "write"),
        "issues": ("read", "write"),
        "merge_queues": ("read", "write"),
        "metadata": ("read", "write"),
        "packages": ("read", "write"),
        "pages": ("read", "write"),
        "pull_requests": ("read", "write"),
        "repository_custom_properties": ("read", "write"),
        "repository_hooks": ("read", "write"),
        "repository_projects": ("read", "write", "admin"),
        "secret_scanning_alerts": ("read", "write"),
        "secrets": ("read", "write"),
        "security_events": ("read", "write"),
        "single_file": ("read", "write"),
        "statuses": ("read", "write"),
        "vulnerability_alerts": ("read", "write"),
        "workflows": ("write",),
        "custom_properties_for_organizations": ("read", "write"),
        "members": ("read", "write"),
        "organization_administration": ("read", "write"),
        "organization_custom_roles": ("read", "write"),
        "organization_custom_org_roles": ("read", "write"),
        "organization_custom_properties": ("read", "write", "admin"),
        "organization_copilot_seat_management": ("read", "write"),
        "organization_copilot_agent_settings": ("read", "write"),
        "organization_announcement_banners": ("read", "write"),
        "organization_events": ("read",),
        "organization_hooks": ("read", "write"),
        "organization_personal_access_tokens": ("read", "write"),
        "organization_personal_access_token_requests": ("read", "write"),
        "organization_plan": ("read",),
        "organization_projects": ("read", "write", "admin"),
        "organization_packages": ("read", "write"),
        "organization_secrets": ("read", "write"),
        "organization_self_hosted_runners": ("read", "write"),
        "organization_user_blocking": ("read", "write"),
        "email_addresses": ("read", "write"),
        "followers": ("read", "write"),
        "git_ssh_keys": ("read", "write"),
        "gpg_keys": ("read", "write"),
        "interaction_limits": ("read", "write"),
        "profile": ("write",),
        "starring": ("read", "write"),
        "enterprise_custom_properties_for_organizations": ("read", "write", "admin"),
    }
)

#: GitHub adds this to every token that reaches repositories, asked for or not.
IMPLICIT_PERMISSION = ("metadata", "read")


def rank(level: str) -> int:
    """The level's place in none < read < write < admin (KeyError for anything else)."""
    return _RANK[level]


def level_error(name: str, level: object) -> str | None:
    """Why ``name: level`` is not a valid GitHub App permission, or None when it is."""
    if name not in PERMISSIONS:
        return f"unknown permission {name[:60]!r} (see GitHub's app-permissions)"
    allowed = PERMISSIONS[name]
    if not isinstance(level, str) or level not in allowed:
        shown = repr(level[:20]) if isinstance(level, str) else type(level).__name__
        return f"{shown} is not a level of {name} (allowed: {', '.join(allowed)})"
    return None
