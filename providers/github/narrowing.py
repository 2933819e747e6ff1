"""Whether a GitHub App token request is covered by another: its repositories a subset, each permission at most.

Repositories are compared case-insensitively, as GitHub names them;
permission levels order as none < read < write < admin.
"""

from __future__ import annotations

from providers.github.permissions import rank
from providers.github.request import GitHubRequest


def github_narrower(child: GitHubRequest, parent: GitHubRequest) -> list[str]:
    """Why ``child`` asks for more than ``parent`` has, each reason naming the widening key."""
    reasons = []
    held = {repository.lower() for repository in parent.repositories}
    for index, repository in enumerate(child.repositories):
        if repository.lower() not in held:
            reasons.append(f"repositories[{index}]: {repository} is not one of the parent's repositories")
    granted = dict(parent.permissions)
    for name, level in child.permissions:
        if name not in granted:
            reasons.append(f"permissions.{name}: the parent's token has no {name} permission")
        elif rank(level) > rank(granted[name]):
            reasons.append(f"permissions.{name}: {level} is above the parent's {granted[name]}")
    return reasons
