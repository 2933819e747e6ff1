"""What a manifest may ask of the ``github_app`` provider and what a policy grant allows.

A request names 1 to 500 repositories as ``owner/name``, all of one owner
(compared case-insensitively, as GitHub does), and a non-empty map of
permissions whose names and levels come from GitHub's ``app-permissions``
schema. A grant lists ``owner/name`` globs (``*`` and ``?`` stop at ``/``) and
the highest level per permission; levels order as none < read < write < admin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from broker.vocab.fields import Fields, describe, shown
from broker.vocab.globs import any_match
from providers.base import CredentialRequest, Grant
from providers.github.permissions import level_error, rank

MAX_REPOSITORIES = 500
OWNER = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?"
REPO = r"[A-Za-z0-9._-]{1,100}"
REPOSITORY = re.compile(rf"(?P<owner>{OWNER})/(?P<name>{REPO})")
REPOSITORY_GLOB = re.compile(r"[A-Za-z0-9*?-]{1,39}/[A-Za-z0-9._*?-]{1,100}")


def _repository_error(value: str) -> str | None:
    """Why ``value`` is not an ``owner/name`` GitHub repository, or None."""
    match = REPOSITORY.fullmatch(value)
    if match is None:
        return "is not owner/name (letters, digits, '-' in the owner; also '.', '_' in the name)"
    name = match["name"]
    if name in (".", "..") or name.lower().endswith(".git"):
        return "is not a repository name GitHub allows"
    return None


def _permissions(fields: Fields, key: str) -> tuple[tuple[str, str], ...]:
    """A non-empty ``name: level`` map checked against GitHub's app-permissions schema."""
    table = fields.mapping(key)
    assert table is not None
    entries = table.items()
    if not entries:
        raise fields.fail(key, "needs at least one permission")
    result: list[tuple[str, str]] = []
    for name, level in entries:
        if not isinstance(name, str):
            raise fields.fail(key, f"permission names are strings, got {describe(name)}")
        problem = level_error(name, level)
        if problem is not None:
            raise table.fail(name[:60], problem)
        result.append((name, level))
    return tuple(sorted(result))


@dataclass(frozen=True)
class GitHubRequest(CredentialRequest):
    owner: str = ""
    repositories: tuple[str, ...] = ()  # owner/name, as the manifest wrote them
    permissions: tuple[tuple[str, str], ...] = ()  # sorted (name, level) pairs

    def names(self) -> list[str]:
        """Bare repository names, as the mint call wants them."""
        return [r.split("/", 1)[1] for r in self.repositories]

    def permission_map(self) -> dict[str, str]:
        return dict(self.permissions)

    def scope(self) -> dict[str, Any]:
        return {"repositories": list(self.repositories), "permissions": self.permission_map()}


@dataclass(frozen=True)
class GitHubGrant(Grant[GitHubRequest]):
    repositories: tuple[str, ...] = ()  # owner/name globs; '*' and '?' stop at '/'
    permissions: tuple[tuple[str, str], ...] = ()  # name -> highest level granted

    def check(self, request: GitHubRequest) -> list[str]:
        reasons = [
            f"repository {repo!r} is not granted"
            for repo in request.repositories
            if not any_match(self.repositories, repo, ignore_case=True)
        ]
        granted = dict(self.permissions)
        for name, level in request.permissions:
            if name not in granted:
                reasons.append(f"permission {name}: {level} is not granted")
            elif rank(level) > rank(granted[name]):
                reasons.append(f"permission {name}: {level} is above the granted {granted[name]}")
        return reasons


def parse_request(fields: Fields, *, name: str, provider: str, ttl: int | None) -> GitHubRequest:
    """The ``repositories`` and ``permissions`` of one manifest credential (untrusted input)."""
    repositories = fields.string_list("repositories", max_items=MAX_REPOSITORIES, max_len=150, unique=False)
    assert repositories is not None
    seen: set[str] = set()
    owner = ""
    for index, repo in enumerate(repositories):
        where = f"repositories[{index}]"
        problem = _repository_error(repo)
        if problem is not None:
            raise fields.fail(where, f"{shown(repo)} {problem}")
        if repo.lower() in seen:
            raise fields.fail(where, f"{shown(repo)} is listed twice")
        seen.add(repo.lower())
        repo_owner = repo.split("/", 1)[0]
        if not owner:
            owner = repo_owner
        elif repo_owner.lower() != owner.lower():
            raise fields.fail(
                where, f"{shown(repo)}: one credential covers one owner ({owner}); use another credential"
            )
    permissions = _permissions(fields, "permissions")
    return GitHubRequest(
        name=name,
        provider=provider,
        ttl=ttl,
        owner=owner,
        repositories=repositories,
        permissions=permissions,
    )


def compile_grant(fields: Fields, *, provider: str, max_ttl: int | None) -> GitHubGrant:
    """The ``repositories`` globs and ``permissions`` ceilings of one policy grant."""
    repositories = fields.string_list(
        "repositories", pattern=REPOSITORY_GLOB, max_items=500, max_len=150, hint="an owner/name glob"
    )
    assert repositories is not None
    permissions = _permissions(fields, "permissions")
    return GitHubGrant(provider=provider, max_ttl=max_ttl, repositories=repositories, permissions=permissions)
