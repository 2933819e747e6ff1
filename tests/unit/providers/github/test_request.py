"""The ``github_app`` provider's manifest requests and policy grants, without a server: parsing and refusals,
what a grant covers and names when it does not, and the permission table against GitHub's contract.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from broker.vocab.errors import ManifestError, PolicyFileError
from providers.github.permissions import PERMISSIONS as PERMISSION_TABLE
from tests.fixtures.github import GITHUB_CONTRACT
from tests.fixtures.github_app import ASK, GRANT, PERMS, grant, parse

# -- manifest requests -------------------------------------------------------------------


def test_parse_valid_request() -> None:
    request = parse(
        {
            "repositories": ["octo-org/widgets", "Octo-Org/docs-site"],
            "permissions": {"issues": "read", "contents": "write"},
        }
    )
    assert request.owner == "octo-org"
    assert request.names() == ["widgets", "docs-site"]
    assert request.permissions == (("contents", "write"), ("issues", "read"))
    assert request.scope() == {
        "repositories": ["octo-org/widgets", "Octo-Org/docs-site"],
        "permissions": {"contents": "write", "issues": "read"},
    }
    assert parse({"repositories": ["o/a.b_c-d"], "permissions": {"workflows": "write"}}).names() == ["a.b_c-d"]
    assert (
        len(parse({"repositories": [f"o/r{i}" for i in range(500)], "permissions": {"contents": "read"}}).repositories)
        == 500
    )


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"repositories": ["octo-org/a", "other/b"], "permissions": PERMS}, "repositories[1]"),
        ({"repositories": [f"octo-org/r{i}" for i in range(501)], "permissions": PERMS}, "repositories"),
        ({"repositories": [], "permissions": PERMS}, "repositories"),
        ({"permissions": PERMS}, "repositories"),
        ({"repositories": "octo-org/widgets", "permissions": PERMS}, "repositories"),
        ({"repositories": [42], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["octo-org/.."], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["../etc/passwd"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["octo-org/widgets/../x"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["widgets"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["https://github.com/octo-org/widgets"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["-octo/widgets"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["o" * 40 + "/widgets"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["octo-org/widgets.git"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["octo-org/wid gets"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["octo-org/widgets", "octo-org/Widgets"], "permissions": PERMS}, "repositories[1]"),
        ({"repositories": ["octo-org/widgets"]}, "permissions"),
        ({"repositories": ["octo-org/widgets"], "permissions": {}}, "permissions"),
        ({"repositories": ["octo-org/widgets"], "permissions": ["contents"]}, "permissions"),
        (
            {"repositories": ["octo-org/widgets"], "permissions": {"pull-requests": "write"}},
            "permissions.pull-requests",
        ),
        ({"repositories": ["octo-org/widgets"], "permissions": {"workflows": "read"}}, "permissions.workflows"),
        ({"repositories": ["octo-org/widgets"], "permissions": {"contents": "admin"}}, "permissions.contents"),
        ({"repositories": ["octo-org/widgets"], "permissions": {"contents": "none"}}, "permissions.contents"),
        ({"repositories": ["octo-org/widgets"], "permissions": {"contents": True}}, "permissions.contents"),
        ({"repositories": ["octo-org/widgets"], "permissions": {1: "read"}}, "permissions"),
        ({"repositories": ["octo-org/widgets"], "permissions": PERMS, "repository_ids": [1]}, "repository_ids"),
    ],
)
def test_parse_refuses_bad_requests(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ManifestError) as caught:
        parse(data)
    assert caught.value.message.startswith(f"credentials[0].{field}:"), caught.value.message
    assert "\n" not in caught.value.message


# -- policy grants -----------------------------------------------------------------------


def test_grant_covers_and_names_what_falls_outside() -> None:
    compiled = grant(GRANT)
    assert compiled.check(parse(ASK)) == []
    assert compiled.check(parse({"repositories": ["Octo-Org/Docs-Site"], "permissions": {"metadata": "read"}})) == []
    reasons = compiled.check(
        parse(
            {
                "repositories": ["octo-org/widgets", "octo-org/secret-infra", "octo-org/docs"],
                "permissions": {"contents": "write", "issues": "write", "metadata": "write"},
            }
        )
    )
    assert reasons == [
        "repository 'octo-org/secret-infra' is not granted",
        "repository 'octo-org/docs' is not granted",
        "permission issues: write is not granted",
        "permission metadata: write is above the granted read",
    ]


def test_grant_levels_and_globs() -> None:
    projects = grant({"repositories": ["octo-*/*"], "permissions": {"repository_projects": "write"}})
    ask = {"repositories": ["octo-org/anything"], "permissions": {"repository_projects": "admin"}}
    assert projects.check(parse(ask)) == ["permission repository_projects: admin is above the granted write"]
    ask["permissions"] = {"repository_projects": "read"}
    assert projects.check(parse(ask)) == []
    assert (
        grant({"repositories": ["octo-org/w?dgets"], "permissions": PERMS}).check(
            parse({"repositories": ["octo-org/widgets"], "permissions": PERMS})
        )
        == []
    )
    other_owner = parse({"repositories": ["octo-orgx/widgets"], "permissions": PERMS})
    assert grant({"repositories": ["octo-org/*"], "permissions": PERMS}).check(other_owner)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"repositories": ["octo-org"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["octo-org/a/b"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["*"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["octo-org/*"], "permissions": {"contents": "owner"}}, "permissions.contents"),
        ({"repositories": ["octo-org/*"], "permissions": {"typo": "read"}}, "permissions.typo"),
        ({"repositories": ["octo-org/*"]}, "permissions"),
    ],
)
def test_grant_compile_refuses(data: dict[str, Any], field: str) -> None:
    with pytest.raises(PolicyFileError, match=rf"^rules\[0\]\.grants\[0\]\.{re_escape(field)}:"):
        grant(data)


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_permission_table_equals_the_contract() -> None:
    schema = json.loads(GITHUB_CONTRACT.read_text(encoding="utf-8"))["components"]["schemas"]["app-permissions"][
        "properties"
    ]
    assert dict(PERMISSION_TABLE) == {name: tuple(p["enum"]) for name, p in schema.items()}
    assert len(PERMISSION_TABLE) == 55
