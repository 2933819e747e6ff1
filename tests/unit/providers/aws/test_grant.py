"""The ``aws_sts`` provider's grants, without a server: a request is allowed only when every role, action and
resource it asks for is contained in the grant's patterns (wildcard containment, not string matching).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from broker.vocab.errors import PolicyFileError
from broker.vocab.globs import glob_match, glob_within
from providers.aws.request import AwsStsRequest
from tests.fixtures.aws import ACCOUNT, ROLE_ARN
from tests.fixtures.aws_sts import S3_READ, grant, parse, policy, statement


@pytest.mark.parametrize(
    ("requested", "granted", "ignore_case", "within"),
    [
        ("s3:GetObject", "s3:GetObject", False, True),
        ("s3:GetObject", "s3:*", False, True),
        ("s3:Get*", "s3:*", False, True),
        ("s3:Get*", "s3:Get*", False, True),
        ("s3:GetObject*", "s3:Get*", False, True),
        ("s3:*", "s3:Get*", False, False),
        ("s3:Get*", "s3:GetObject", False, False),
        ("*", "s3:*", False, False),
        ("s3:*", "*", False, True),
        ("s3:Get?bject", "s3:Get*", False, True),
        ("s3:GetObject", "s3:Get?bject", False, True),
        ("s3:Get?bject", "s3:GetObject", False, False),
        ("S3:getobject", "s3:GetObject", True, True),
        ("S3:getobject", "s3:GetObject", False, False),
        ("?*", "*?", False, True),
        ("a*b*c", "a*c", False, True),
        ("a*c", "a*b*c", False, False),
        ("**", "*", False, True),
    ],
)
def test_glob_within(requested: str, granted: str, ignore_case: bool, within: bool) -> None:
    assert glob_within(requested, granted, ignore_case=ignore_case) is within


def test_pattern_within_agrees_with_brute_force() -> None:
    """Every pair of globs up to 3 characters over {a, b, *, ?}, against all strings up to 6 over {a, b, c}."""
    patterns = ["".join(p) for n in range(4) for p in itertools.product("ab*?", repeat=n)]
    strings = ["".join(s) for n in range(7) for s in itertools.product("abc", repeat=n)]
    matched = {p: frozenset(s for s in strings if glob_match(p, s, cross_slash=True)) for p in patterns}
    for requested, granted in itertools.product(patterns, repeat=2):
        expected = matched[requested] <= matched[granted]
        assert glob_within(requested, granted) is expected, (requested, granted)


def request_with(session_policy: dict[str, Any] | None = None, **body: Any) -> AwsStsRequest:
    data: dict[str, Any] = {"role_arn": ROLE_ARN, **body}
    if session_policy is not None:
        data["session_policy"] = session_policy
    return parse(data)


def test_grant_roles_are_case_sensitive_globs_crossing_slashes() -> None:
    g = grant(roles=["arn:aws:iam::123456789012:role/agent-*"], actions=["*"])
    assert g.check(request_with(role_arn="arn:aws:iam::123456789012:role/agent-ci")) == []
    assert g.check(request_with(role_arn="arn:aws:iam::123456789012:role/agent-ci/x")) == []
    assert g.check(request_with(role_arn="arn:aws:iam::123456789012:role/Agent-ci")) == [
        "role arn:aws:iam::123456789012:role/Agent-ci is not granted"
    ]


def test_grant_actions_contain_requested_wildcards_case_insensitively() -> None:
    g = grant(roles=[ROLE_ARN], actions=["s3:Get*", "s3:ListBucket"])
    ok = policy(statement(Action=["S3:getobject", "s3:GetObject*", "s3:listbucket"]))
    assert g.check(request_with(ok)) == []
    wide = policy(statement(), statement(Action=["s3:*", "s3:ListBucket"]))
    assert g.check(request_with(wide)) == ["session_policy.Statement[1]: action s3:* is outside the grant's actions"]


def test_grant_resources_are_contained_case_sensitively() -> None:
    g = grant(roles=[ROLE_ARN], actions=["s3:*"], resources=["arn:aws:s3:::ci-*"])
    assert g.check(request_with(policy(statement(Resource="arn:aws:s3:::ci-artifacts/*")))) == []
    reasons = g.check(request_with(policy(statement(Resource=["arn:aws:s3:::CI-artifacts/*", "*"]))))
    assert len(reasons) == 2
    assert reasons[0].startswith("session_policy.Statement[0]: resource 'arn:aws:s3:::CI-artifacts/*'")
    # A policy variable may expand to anything, so it counts as a wildcard.
    g2 = grant(roles=[ROLE_ARN], actions=["s3:*"], resources=["arn:aws:s3:::ci-??????"])
    assert g2.check(request_with(policy(statement(Resource="arn:aws:s3:::ci-${aws:userid}")))) != []
    assert g2.check(request_with(policy(statement(Resource="arn:aws:s3:::ci-abcdef")))) == []


def test_grant_always_allows_deny_statements() -> None:
    g = grant(roles=[ROLE_ARN], actions=["s3:GetObject"], resources=["arn:aws:s3:::b/*"])
    deny_all = statement(Effect="Deny", Action="*", Resource="*")
    assert g.check(request_with(policy(statement(), deny_all))) == []


@pytest.mark.parametrize("effect", ["Allow", "Deny"])
def test_grant_denies_not_action_and_not_resource_naming_them(effect: str) -> None:
    """Well-formed IAM, so the manifest parses; every grant then denies it, so the denial is logged."""
    g = grant(roles=[ROLE_ARN], actions=["*"])
    not_action = statement(Effect=effect, NotAction=["iam:*"])
    del not_action["Action"]
    not_resource = statement(Effect=effect, NotResource="arn:aws:s3:::secret/*")
    del not_resource["Resource"]
    request = request_with(policy(statement(), not_action, not_resource))
    assert request.session_policy is not None
    assert request.session_policy.document()["Statement"][1]["NotAction"] == ["iam:*"]
    assert g.check(request) == [
        "session_policy.Statement[1]: NotAction is refused: list the allowed actions under Action",
        "session_policy.Statement[2]: NotResource is refused: list the resources under Resource",
    ]


def test_grant_without_session_policy() -> None:
    narrow = grant(roles=[ROLE_ARN], actions=["s3:GetObject"])
    assert narrow.check(request_with()) == ["no session_policy: the role's full permissions exceed the grant's actions"]
    assert grant(roles=[ROLE_ARN], actions=["*"]).check(request_with()) == []
    assert grant(roles=[ROLE_ARN], actions=["*"], resources=["arn:aws:s3:::b/*"]).check(request_with()) == [
        "no session_policy: the role's full permissions exceed the grant's resources"
    ]
    strict = grant(roles=[ROLE_ARN], actions=["*"], require_session_policy=True)
    assert strict.check(request_with()) == ["the grant requires a session_policy"]
    assert strict.check(request_with(S3_READ)) == []


def test_grant_policy_arns() -> None:
    arn = f"arn:aws:iam::{ACCOUNT}:policy/ci-read"
    without = grant(roles=[ROLE_ARN], actions=["s3:GetObject"])
    assert without.check(request_with(S3_READ, policy_arns=[arn])) == [f"policy_arns[0] {arn} is not granted"]
    allowed = grant(
        roles=[ROLE_ARN],
        actions=["s3:GetObject"],
        require_session_policy=True,
        policy_arns=[f"arn:aws:iam::{ACCOUNT}:policy/ci-*"],
    )
    assert allowed.check(request_with(policy_arns=[arn])) == []  # managed policies the grant names narrow too


def test_compile_grant_refuses_bad_fields() -> None:
    with pytest.raises(PolicyFileError, match=r"rules\[0\]\.grants\[0\]\.actions\[0\]"):
        grant(roles=[ROLE_ARN], actions=["s3 Get"])
    with pytest.raises(PolicyFileError, match=r"grants\[0\]\.roles: required"):
        grant(actions=["*"])
    with pytest.raises(PolicyFileError, match=r"grants\[0\]\.require_session_policy"):
        grant(roles=[ROLE_ARN], actions=["*"], require_session_policy="yes")
