"""JSON bodies of the GitHub App emulator, shaped as REST API version 2022-11-28 returns them.

Each builder fills every field the contract's schema requires (``integration``,
``installation``, ``installation-token``, ``repository``, ``simple-user``,
``basic-error``, ``validation-error``); ``tests/providers/github/test_emulator.py``
validates them against ``tests/contracts/github-app-api.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

DOCS = "https://docs.github.com/rest"
CREATED = "2024-01-15T09:30:00Z"


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def basic_error(message: str, status: int, docs: str = DOCS) -> dict[str, Any]:
    return {"message": message, "documentation_url": docs, "status": str(status)}


def validation_error(message: str, errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "message": message,
        "documentation_url": f"{DOCS}/apps/apps#create-an-installation-access-token-for-an-app",
    }
    if errors:
        body["errors"] = errors
    body["status"] = "422"
    return body


def user(base: str, login: str, ident: int, kind: str) -> dict[str, Any]:
    api = f"{base}/users/{login}"
    return {
        "login": login,
        "id": ident,
        "node_id": f"MDQ6VXNlcnt{ident}",
        "avatar_url": f"{base}/avatars/u/{ident}",
        "gravatar_id": "",
        "url": api,
        "html_url": f"{base}/{login}",
        "followers_url": f"{api}/followers",
        "following_url": f"{api}/following{{/other_user}}",
        "gists_url": f"{api}/gists{{/gist_id}}",
        "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{api}/subscriptions",
        "organizations_url": f"{api}/orgs",
        "repos_url": f"{api}/repos",
        "events_url": f"{api}/events{{/privacy}}",
        "received_events_url": f"{api}/received_events",
        "type": kind,
        "site_admin": False,
        "user_view_type": "public",
    }


def integration(base: str, app_id: int, slug: str, client_id: str, owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": app_id,
        "slug": slug,
        "client_id": client_id,
        "node_id": f"MDExOkludGVncmF0aW9u{app_id}",
        "owner": owner,
        "name": slug.replace("-", " ").title(),
        "description": "Scoped-credential broker test App",
        "external_url": "https://example.com",
        "html_url": f"{base}/apps/{slug}",
        "created_at": CREATED,
        "updated_at": CREATED,
        "permissions": {"contents": "write", "metadata": "read"},
        "events": [],
        "installations_count": 0,
    }


def installation(
    base: str,
    *,
    ident: int,
    app_id: int,
    slug: str,
    client_id: str,
    account: dict[str, Any],
    permissions: Mapping[str, str],
    selection: str,
) -> dict[str, Any]:
    return {
        "id": ident,
        "account": account,
        "repository_selection": selection,
        "access_tokens_url": f"{base}/app/installations/{ident}/access_tokens",
        "repositories_url": f"{base}/installation/repositories",
        "html_url": f"{base}/organizations/{account['login']}/settings/installations/{ident}",
        "app_id": app_id,
        "client_id": client_id,
        "app_slug": slug,
        "target_id": account["id"],
        "target_type": account["type"],
        "permissions": dict(permissions),
        "events": [],
        "created_at": CREATED,
        "updated_at": CREATED,
        "single_file_name": None,
        "has_multiple_single_files": False,
        "single_file_paths": [],
        "suspended_by": None,
        "suspended_at": None,
    }


def repository(base: str, owner: dict[str, Any], ident: int, name: str) -> dict[str, Any]:
    full = f"{owner['login']}/{name}"
    api = f"{base}/repos/{full}"
    templated = {
        "archive_url": "/{archive_format}{/ref}",
        "assignees_url": "/assignees{/user}",
        "blobs_url": "/git/blobs{/sha}",
        "branches_url": "/branches{/branch}",
        "collaborators_url": "/collaborators{/collaborator}",
        "comments_url": "/comments{/number}",
        "commits_url": "/commits{/sha}",
        "compare_url": "/compare/{base}...{head}",
        "contents_url": "/contents/{+path}",
        "git_commits_url": "/git/commits{/sha}",
        "git_refs_url": "/git/refs{/sha}",
        "git_tags_url": "/git/tags{/sha}",
        "issue_comment_url": "/issues/comments{/number}",
        "issue_events_url": "/issues/events{/number}",
        "issues_url": "/issues{/number}",
        "keys_url": "/keys{/key_id}",
        "labels_url": "/labels{/name}",
        "milestones_url": "/milestones{/number}",
        "notifications_url": "/notifications{?since,all,participating}",
        "pulls_url": "/pulls{/number}",
        "releases_url": "/releases{/id}",
        "statuses_url": "/statuses/{sha}",
        "trees_url": "/git/trees{/sha}",
    }
    plain = [
        "contributors",
        "deployments",
        "downloads",
        "events",
        "forks",
        "hooks",
        "languages",
        "merges",
        "stargazers",
        "subscribers",
        "subscription",
        "tags",
        "teams",
    ]
    body: dict[str, Any] = {
        "id": ident,
        "node_id": f"MDEwOlJlcG9zaXRvcnk{ident}",
        "name": name,
        "full_name": full,
        "owner": owner,
        "private": True,
        "html_url": f"{base}/{full}",
        "description": None,
        "fork": False,
        "url": api,
        "git_url": f"git:{base.split('://', 1)[1]}/{full}.git",
        "ssh_url": f"git@example.invalid:{full}.git",
        "clone_url": f"{base}/{full}.git",
        "svn_url": f"{base}/{full}",
        "mirror_url": None,
        "homepage": None,
        "language": None,
        "forks": 0,
        "forks_count": 0,
        "stargazers_count": 0,
        "watchers_count": 0,
        "watchers": 0,
        "size": 0,
        "default_branch": "main",
        "open_issues": 0,
        "open_issues_count": 0,
        "has_issues": True,
        "has_projects": True,
        "has_wiki": True,
        "has_pages": False,
        "has_downloads": True,  # removed only in API version 2026-03-10
        "archived": False,
        "disabled": False,
        "visibility": "private",
        "license": None,
        "pushed_at": CREATED,
        "created_at": CREATED,
        "updated_at": CREATED,
    }
    for key, suffix in templated.items():
        body[key] = api + suffix
    for key in plain:
        body[f"{key}_url"] = f"{api}/{key}"
    return body
