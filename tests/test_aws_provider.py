"""The ``aws_sts`` provider: request parsing, grant containment, the deny-policy model, and a real moto server.

moto emulates the STS and IAM APIs but enforces no IAM at all: it ignores
trust policies, session policies, tags, SourceIdentity, MaxSessionDuration
and the 10,240-character inline-policy budget. The server tests therefore
assert what the broker sends (captured from botocore's parameters or read
from moto's backend) and what it stores (read back with GetRolePolicy), not
whether AWS would deny a revoked session.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from broker.vocab.errors import BrokerError, ManifestError, PolicyFileError, ProviderError
from broker.vocab.fields import Fields
from broker.vocab.globs import glob_match, glob_within
from broker.vocab.secret import Secret
from providers.aws.deny import (
    POLICY_NAME,
    ROLE_INLINE_BUDGET,
    SOURCE_IDENTITY,
    USERID,
    DenyEntry,
    DenyList,
    bucket_end,
    entries_for,
    policy_size,
)
from providers.aws.errors import AwsErrors
from providers.aws.names import role_session_name
from providers.aws.provider import AwsStsProvider
from providers.aws.request import AwsStsGrant, AwsStsRequest
from providers.base import MintContext, MintedCredential, MintRejected, RevokeOutcome, RevokeTarget
from providers.registry import provider_class
from tests.fixtures.aws import (
    ACCOUNT,
    REGION,
    ROLE_ARN,
    AwsRole,
    iam_client,
    make_aws_provider,
)

S3_READ = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::ci-artifacts/*"]}],
}


def parse(body: dict[str, Any], ttl: int | None = None) -> AwsStsRequest:
    """Parse one manifest credential the way ``broker.core.inputs.manifest`` does (generic keys read first)."""
    data = {"name": "artifacts", "provider": "aws", **body}
    fields = Fields(data, "credentials[0]", ManifestError)
    for key in ("name", "provider", "ttl"):
        fields.raw(key)
    request = AwsStsProvider.parse_request(fields, name="artifacts", provider="aws", ttl=ttl)
    fields.done()
    assert isinstance(request, AwsStsRequest)
    return request


def grant(**body: Any) -> AwsStsGrant:
    fields = Fields({"provider": "aws", **body}, "rules[0].grants[0]", PolicyFileError)
    fields.raw("provider")
    compiled = AwsStsProvider.compile_grant(fields, provider="aws", max_ttl=None)
    fields.done()
    assert isinstance(compiled, AwsStsGrant)
    return compiled


def statement(**overrides: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*", **overrides}


def policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


# -- registry and laziness ---------------------------------------------------------------


def test_registered_and_boto3_imported_lazily() -> None:
    assert provider_class("aws_sts") is AwsStsProvider
    code = (
        "import sys, providers.registry as r; r.provider_class('aws_sts');"
        "assert 'boto3' not in sys.modules and 'botocore' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)


def test_from_config() -> None:
    from broker.vocab.errors import ConfigError

    fields = Fields({"type": "aws_sts", "region": "eu-west-1", "revoke": "expire"}, "providers.aws", ConfigError)
    fields.raw("type")
    provider = AwsStsProvider.from_config("aws", fields, Path("/etc/broker"))
    fields.done()
    assert isinstance(provider, AwsStsProvider)
    assert (provider.clients.region, provider.revoke_mode, provider.clients.endpoint_url) == (
        "eu-west-1",
        "expire",
        None,
    )
    for bad, field in (
        ({"region": "us east"}, "providers.aws.region"),
        ({"region": "us-east-1", "revoke": "never"}, "providers.aws.revoke"),
        ({"region": "us-east-1", "endpoint_url": "ftp://x\n"}, "providers.aws.endpoint_url"),
        ({"region": "us-east-1", "profile": "a b"}, "providers.aws.profile"),
    ):
        with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
            AwsStsProvider.from_config("aws", Fields(bad, "providers.aws", ConfigError), Path("/"))


# -- manifest requests -------------------------------------------------------------------


def test_parse_valid_request() -> None:
    request = parse(
        {
            "role_arn": "arn:aws:iam::123456789012:role/ci/agent-ci",
            "session_policy": S3_READ,
            "policy_arns": ["arn:aws:iam::123456789012:policy/ci-extra"],
        },
        ttl=900,
    )
    assert request.role_name == "agent-ci"
    assert request.policy_json == (
        '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:GetObject"],'
        '"Resource":["arn:aws:s3:::ci-artifacts/*"]}]}'
    )
    assert request.scope() == {
        "role_arn": "arn:aws:iam::123456789012:role/ci/agent-ci",
        "session_policy": S3_READ,
        "policy_arns": ["arn:aws:iam::123456789012:policy/ci-extra"],
    }
    hash(request)  # a frozen value


def test_parse_normalises_single_statement_and_strings() -> None:
    body: dict[str, Any] = {
        "Version": "2008-10-17",
        "Statement": {
            "Sid": "Read1",
            "Effect": "Allow",
            "Action": "s3:Get*",
            "Resource": "*",
            "Condition": {"StringLike": {"s3:prefix": ["ci/*"]}, "Bool": {"aws:SecureTransport": True}},
        },
    }
    request = parse({"role_arn": ROLE_ARN, "session_policy": body})
    assert request.session_policy is not None
    (only,) = request.session_policy.statements
    assert (only.sid, only.actions, only.resources) == ("Read1", ("s3:Get*",), ("*",))
    assert json.loads(request.policy_json)["Statement"][0]["Condition"] == body["Statement"]["Condition"]
    assert parse({"role_arn": ROLE_ARN}).session_policy is None


def _big_policy() -> dict[str, Any]:
    resources = [f"arn:aws:s3:::bucket-{i:04d}/*" for i in range(90)]
    return policy(statement(Resource=resources))


BAD_REQUESTS: list[tuple[dict[str, Any], int | None, str]] = [
    ({"role_arn": "arn:aws:iam::12345:role/x"}, None, r"credentials\[0\]\.role_arn"),
    ({"role_arn": "arn:aws:iam::123456789012:user/x"}, None, r"credentials\[0\]\.role_arn"),
    ({"role_arn": "arn:aws:iam::123456789012:role/" + "r" * 65}, None, r"credentials\[0\]\.role_arn"),
    ({"role_arn": "arn:aws:iam::123456789012:role/a b"}, None, r"credentials\[0\]\.role_arn"),
    ({}, None, r"credentials\[0\]\.role_arn: required"),
    ({"role_arn": ROLE_ARN}, 600, r"credentials\[0\]\.ttl: 10m is below the AWS minimum of 15m"),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(NotAction=5))},
        None,
        r"session_policy\.Statement\[0\]\.NotAction: expected a string or a list of strings",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(), statement(Principal="*"))},
        None,
        r"session_policy\.Statement\[1\]\.Principal",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(NotPrincipal={"AWS": "*"}))},
        None,
        r"session_policy\.Statement\[0\]\.NotPrincipal",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Effect="Maybe"))},
        None,
        r"Statement\[0\]\.Effect: must be Allow or Deny",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": {"Version": "2012-10-17", "Statement": "Allow everything"}},
        None,
        r"session_policy\.Statement: expected a list of statements",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": {"Version": "2012-10-17", "Statement": ["s3:*"]}},
        None,
        r"session_policy\.Statement\[0\]: expected a mapping",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": {"Version": "2012-10-17", "Statement": []}},
        None,
        r"session_policy\.Statement: needs at least 1 item",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(*[statement()] * 101)},
        None,
        r"session_policy\.Statement: has more than 100 items",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": _big_policy()},
        None,
        r"credentials\[0\]\.session_policy: is \d+ characters .* AWS allows 2048",
    ),
    (
        {"role_arn": ROLE_ARN, "policy_arns": [f"arn:aws:iam::{ACCOUNT}:policy/p{i}" for i in range(11)]},
        None,
        r"credentials\[0\]\.policy_arns: has more than 10 items",
    ),
    (
        {"role_arn": ROLE_ARN, "policy_arns": ["arn:aws:iam::999999999999:policy/p"]},
        None,
        r"policy_arns\[0\]: must be in the same partition and account",
    ),
    (
        {"role_arn": ROLE_ARN, "policy_arns": ["arn:aws:s3:::bucket"]},
        None,
        r"policy_arns\[0\]",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": {"Version": "2020-01-01", "Statement": [statement()]}},
        None,
        r"session_policy\.Version: must be one of",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": {"Version": datetime(2012, 10, 17).date(), "Statement": []}},
        None,
        r"session_policy\.Version: expected the string",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Action=42))},
        None,
        r"Statement\[0\]\.Action: expected a string or a list",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Action=["s3:GetObject", "s3 Get"]))},
        None,
        r"Statement\[0\]\.Action\[1\]",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy({"Effect": "Allow", "Action": "s3:GetObject"})},
        None,
        r"Statement\[0\]\.Resource: required",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Resource="bucket/*"))},
        None,
        r"Statement\[0\]\.Resource",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Extra=1))},
        None,
        r"Statement\[0\]\.Extra: unknown key",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Sid="A"), statement(Sid="A"))},
        None,
        r"session_policy\.Statement: Sid 'A' is used twice",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Condition={"Str ingEquals": {"a:b": "c"}}))},
        None,
        r"Statement\[0\]\.Condition\.Str ingEquals: is not a condition operator",
    ),
    (
        {"role_arn": ROLE_ARN, "session_policy": policy(statement(Condition={"StringEquals": {"a:b": {}}}))},
        None,
        r"Condition\.StringEquals\.a:b: expected a string, number or boolean",
    ),
    ({"role_arn": ROLE_ARN, "session_policy": ["not", "a", "mapping"]}, None, r"session_policy: expected a mapping"),
    ({"role_arn": ROLE_ARN, "tags": {"broker:session": "x"}}, None, r"credentials\[0\]\.tags: unknown key"),
]


@pytest.mark.parametrize(("body", "ttl", "message"), BAD_REQUESTS)
def test_parse_refuses_bad_requests(body: dict[str, Any], ttl: int | None, message: str) -> None:
    with pytest.raises(ManifestError, match=message) as caught:
        parse(body, ttl=ttl)
    assert caught.value.exit_code == 2
    assert "\n" not in caught.value.message


def test_manifest_and_config_wire_the_provider(tmp_path: Path) -> None:
    """The SPEC example's AWS credential through the real config and manifest loaders."""
    from broker.core.inputs.config import parse_config
    from broker.core.inputs.manifest import parse_manifest

    config = parse_config({"providers": {"aws": {"type": "aws_sts", "region": REGION}}}, tmp_path / "b.toml")
    manifest = parse_manifest(
        b"""
version: 1
task: fix-build-123
ttl: 30m
credentials:
  - name: artifacts
    provider: aws
    role_arn: arn:aws:iam::123456789012:role/agent-ci
    ttl: 15m
    session_policy:
      Version: "2012-10-17"
      Statement:
        - {Effect: Allow, Action: ["s3:GetObject"], Resource: ["arn:aws:s3:::ci-artifacts/*"]}
""",
        config,
    )
    (request,) = manifest.credentials
    assert isinstance(request, AwsStsRequest) and request.ttl == 900
    assert request.scope()["session_policy"] == S3_READ


# -- grants and containment --------------------------------------------------------------


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


# -- the deny-policy model and the budget ------------------------------------------------

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def test_bucket_end_rounds_up_to_the_hour() -> None:
    assert bucket_end(T0) == T0
    assert bucket_end(T0 + timedelta(seconds=1)) == T0 + timedelta(hours=1)
    assert bucket_end(datetime(2026, 11, 29, 11, 30, tzinfo=timezone(timedelta(hours=2)))) == T0


def test_entries_document_round_trip_merge_and_prune() -> None:
    """One short source-identity entry per session, kept an hour past expiry (for chained sessions)."""
    first = entries_for("AROAEXAMPLE:s-aaaaaa.x", "s-aaaaaa", T0 + timedelta(minutes=20))
    assert first == (DenyEntry(T0 + timedelta(hours=2), SOURCE_IDENTITY, "s-aaaaaa"),)
    second = entries_for("AROAEXAMPLE:s-bbbbbb.y", "s-bbbbbb", T0 + timedelta(hours=5))
    # A session without a source identity (none minted by this broker) falls back to its user id.
    bare = entries_for("AROAEXAMPLE:s-cccccc.z", "", T0 + timedelta(minutes=20))
    assert bare == (DenyEntry(T0 + timedelta(hours=1), USERID, "AROAEXAMPLE:s-cccccc.z"),)
    deny = DenyList().merged(first).merged(second).merged(bare).merged(first)
    document = deny.document()
    assert document is not None
    assert [s["Sid"] for s in document["Statement"]] == [
        "BrokerRevokedUntil20261129T1100Z",
        "BrokerRevokedSourceUntil20261129T1200Z",
        "BrokerRevokedSourceUntil20261129T1600Z",
    ]
    assert document["Statement"][1] == {
        "Sid": "BrokerRevokedSourceUntil20261129T1200Z",
        "Effect": "Deny",
        "Action": "*",
        "Resource": "*",
        "Condition": {"StringEquals": {"aws:SourceIdentity": ["s-aaaaaa"]}},
    }
    assert DenyList.parse(document) == deny
    assert deny.covers(first + second + bare)
    pruned = deny.pruned(T0 + timedelta(hours=2))
    assert not pruned.covers(first) and not pruned.covers(bare) and pruned.covers(second)
    assert pruned.values(SOURCE_IDENTITY) == ["s-bbbbbb"] and pruned.values(USERID) == []
    assert deny.pruned(T0 + timedelta(hours=6)).document() is None


def test_merge_keeps_one_value_in_its_latest_bucket() -> None:
    early = entries_for("AROAX:s-aaaaaa.x", "s-aaaaaa", T0)
    late = entries_for("AROAX:s-aaaaaa.y", "s-aaaaaa", T0 + timedelta(hours=3))
    deny = DenyList().merged(late).merged(early)
    assert deny.values(SOURCE_IDENTITY) == ["s-aaaaaa"]
    assert deny.covers(late) and deny.covers(early)
    assert sum(1 for e in deny.entries if e.key == SOURCE_IDENTITY) == 1


def test_foreign_statements_are_kept_verbatim() -> None:
    foreign = {"Sid": "OperatorRule", "Effect": "Deny", "Action": "s3:*", "Resource": "*"}
    legacy = {
        "Sid": "BrokerRevokedSessions",
        "Effect": "Deny",
        "Action": "*",
        "Resource": "*",
        "Condition": {"StringEquals": {"aws:userid": ["AROAOLD:s"]}},
    }
    deny = DenyList.parse({"Version": "2012-10-17", "Statement": [foreign, legacy]})
    assert deny.entries == frozenset()
    updated = deny.merged(entries_for("AROAX:s-aaaaaa.x", "s-aaaaaa", T0)).pruned(T0 + timedelta(days=1))
    document = updated.document()
    assert document is not None and document["Statement"] == [foreign, legacy]


def test_two_hundred_sessions_fit_even_spread_over_every_bucket() -> None:
    """The worst case: 200 live sessions with expiries spread over 12 h, plus entries still ending."""
    now = T0 + timedelta(minutes=30)
    deny = DenyList()
    for i in range(200):
        expires = now - timedelta(hours=1) + timedelta(seconds=i * 13 * 3600 // 199)  # -1 h .. +12 h
        deny = deny.merged(entries_for(f"AROA{'X' * 17}:s-{i:012d}.{'c' * 40}", f"s-{i:012d}", expires))
    document = deny.document()
    assert document is not None
    assert len(document["Statement"]) == 14  # every bucket that can end after now
    assert policy_size(document) < 5_600 < ROLE_INLINE_BUDGET
    one_more = policy_size(deny.merged(entries_for("", "s-000000000200", now)).document()) - policy_size(document)
    assert one_more == 17  # an entry in an existing bucket: the session id, quotes and a comma


def test_policy_size_ignores_whitespace() -> None:
    document = {"Version": "2012-10-17", "Statement": [{"Sid": "A B", "Effect": "Deny"}]}
    compact = json.dumps(document, separators=(",", ":"))
    assert policy_size(document) == len(compact) - 1
    assert policy_size(None) == 0


def test_role_session_names_are_valid_and_unique() -> None:
    assert role_session_name("s-4k2j9x7q3m1p", "artifacts") == "s-4k2j9x7q3m1p.artifacts"
    long_session = "s" + "x" * 40
    names = {role_session_name(long_session, f"{'c' * 30}{i:02d}") for i in range(50)}
    assert len(names) == 50
    assert all(2 <= len(n) <= 64 and n.startswith(long_session + ".") for n in names)
    # '.' is in neither alphabet, so a session id holding '-' cannot be confused with a credential name
    assert role_session_name("s-aaaaaa-x", "y") != role_session_name("s-aaaaaa", "x-y")


def test_error_messages_are_scrubbed_one_line_and_mapped() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError, ParamValidationError

    secret, token = Secret("wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"), Secret("FwoGZXIvYXdzEBYaDH+tokentokentoken")
    provider = make_aws_provider("http://127.0.0.1:1")
    leak = ClientError(
        {"Error": {"Code": "AccessDenied", "Message": f"key {secret.reveal()}\ntoken {token.reveal()}"}},
        "GetCallerIdentity",
    )
    with pytest.raises(ProviderError) as caught, AwsErrors(provider.clients, "check", secrets=(secret, token)):
        raise leak
    assert secret.reveal() not in str(caught.value) and token.reveal() not in str(caught.value)
    assert "\n" not in caught.value.message and caught.value.__cause__ is None
    assert caught.value.retryable
    with pytest.raises(ProviderError) as bad, AwsErrors(provider.clients, "AssumeRole"):
        raise ClientError({"Error": {"Code": "MalformedPolicyDocument", "Message": "no"}}, "AssumeRole")
    assert not bad.value.retryable
    with pytest.raises(ManifestError), AwsErrors(provider.clients, "AssumeRole"):
        raise ParamValidationError(report="DurationSeconds below 900")
    with pytest.raises(ProviderError, match=r"cannot reach http://127\.0\.0\.1:1"), AwsErrors(provider.clients, "x"):
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
    with AwsErrors(provider.clients, "GetRolePolicy", missing_ok=True) as errors:
        raise ClientError({"Error": {"Code": "NoSuchEntity", "Message": "none"}}, "GetRolePolicy")
    assert errors.missing


# -- against a moto server ---------------------------------------------------------------


def context(session_id: str = "s-4k2j9x7q3m1p", ttl: int = 900, session_ttl: int = 1800) -> MintContext:
    return MintContext(
        session_id=session_id,
        task="fix-build-123",
        requester="ci",
        ttl=ttl,
        session_expires_at=datetime.now(UTC) + timedelta(seconds=session_ttl),
        mount_dir=PurePosixPath("/run/secrets/artifacts"),
    )


def target(minted: MintedCredential, expires_at: datetime | None = None) -> RevokeTarget:
    return RevokeTarget(name="artifacts", reference=dict(minted.reference), expires_at=expires_at or minted.expires_at)


def deny_document(role: AwsRole) -> dict[str, Any]:
    response = iam_client(role.endpoint_url).get_role_policy(RoleName=role.name, PolicyName=POLICY_NAME)
    document: dict[str, Any] = response["PolicyDocument"]
    return document


def denied(role: AwsRole) -> DenyList:
    return DenyList.parse(deny_document(role))


def record_calls(provider: AwsStsProvider, service: str, operation: str) -> list[dict[str, Any]]:
    """The parameters of every ``operation`` call the provider's own client makes (as botocore sends them)."""
    calls: list[dict[str, Any]] = []

    def remember(params: dict[str, Any], **_: Any) -> None:
        calls.append(json.loads(json.dumps(params, default=str)))

    provider.clients.client(service).meta.events.register(f"provide-client-params.{service}.{operation}", remember)
    return calls


def moto_assumed_roles() -> list[Any]:
    from moto.sts.models import sts_backends

    roles: list[Any] = sts_backends[ACCOUNT]["aws"].assumed_roles
    return roles


@pytest.fixture
def minted(aws_provider: AwsStsProvider) -> Iterator[tuple[AwsStsProvider, MintedCredential]]:
    request = parse({"role_arn": ROLE_ARN, "session_policy": S3_READ})
    yield aws_provider, aws_provider.mint(request, context())


@pytest.mark.server
def test_mint_writes_working_files_and_sends_the_narrowed_request(
    aws_provider: AwsStsProvider, aws_role: AwsRole, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files work with a fresh SDK session; moto only records Policy, so tags etc. come from botocore."""
    import boto3

    sent = record_calls(aws_provider, "sts", "AssumeRole")
    request = parse(
        {"role_arn": ROLE_ARN, "session_policy": S3_READ, "policy_arns": [f"arn:aws:iam::{ACCOUNT}:policy/p"]}
    )
    ctx = context(ttl=900)
    minted = aws_provider.mint(request, ctx)

    session_name = "s-4k2j9x7q3m1p.artifacts"
    assumed_role_id = f"{aws_role.role_id}:{session_name}"
    assert sent == [
        {
            "RoleArn": ROLE_ARN,
            "RoleSessionName": session_name,
            "DurationSeconds": 900,
            "SourceIdentity": "s-4k2j9x7q3m1p",
            "Tags": [
                {"Key": "broker:session", "Value": "s-4k2j9x7q3m1p"},
                {"Key": "broker:task", "Value": "fix-build-123"},
                {"Key": "broker:credential", "Value": "artifacts"},
            ],
            "Policy": request.policy_json,
            "PolicyArns": [{"arn": f"arn:aws:iam::{ACCOUNT}:policy/p"}],
        }
    ]
    (recorded,) = moto_assumed_roles()
    assert (recorded.role_arn, recorded.session_name, recorded.policy) == (
        ROLE_ARN,
        session_name,
        request.policy_json,
    )
    assert minted.reference["assumed_role_id"] == assumed_role_id
    assert minted.reference["access_key_id"] == recorded.access_key_id
    assert minted.reference["role_id"] == aws_role.role_id
    assert minted.reference["role_session_name"] == session_name
    assert minted.reference["policy_digest"].startswith("sha256:") and len(minted.reference["policy_digest"]) == 71
    assert minted.secret.reveal() == recorded.secret_access_key
    assert minted.scope == request.scope()
    assert minted.env == {
        "AWS_SHARED_CREDENTIALS_FILE": "/run/secrets/artifacts/credentials",
        "AWS_CONFIG_FILE": "/run/secrets/artifacts/config",
        "AWS_REGION": REGION,
    }
    now = datetime.now(UTC)
    assert now + timedelta(seconds=880) < minted.expires_at <= ctx.session_expires_at
    assert isinstance(minted.files["credentials"], Secret) and isinstance(minted.files["config"], str)
    assert f"endpoint_url = {aws_role.endpoint_url}\n" in minted.files["config"]

    # What the sandbox would do: only the two files, no broker identity in the environment.
    (tmp_path / "credentials").write_text(minted.files["credentials"].reveal())
    (tmp_path / "config").write_text(minted.files["config"])
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    identity = boto3.session.Session().client("sts").get_caller_identity()
    assert identity["Arn"] == f"arn:aws:sts::{ACCOUNT}:assumed-role/agent-ci/{session_name}"
    assert identity["UserId"] == assumed_role_id


@pytest.mark.server
def test_mint_caps_expiry_at_the_session(aws_provider: AwsStsProvider) -> None:
    ctx = context(ttl=900, session_ttl=600)  # the core never does this, but the cap must hold anyway
    minted = aws_provider.mint(parse({"role_arn": ROLE_ARN, "session_policy": S3_READ}), ctx)
    assert minted.expires_at == ctx.session_expires_at
    assert minted.reference["policy_digest"] != ""
    unnarrowed = aws_provider.mint(parse({"role_arn": ROLE_ARN}), context(session_id="s-other1"))
    assert unnarrowed.reference["policy_digest"] == "" and unnarrowed.scope["session_policy"] is None


@pytest.mark.server
def test_ttl_above_max_session_duration_is_refused_before_assume_role(aws_provider: AwsStsProvider) -> None:
    """moto would accept 7200 s on a 3600 s role; the broker must refuse it itself."""
    with pytest.raises(ProviderError, match="MaxSessionDuration 3600s") as caught:
        aws_provider.mint(parse({"role_arn": ROLE_ARN}), context(ttl=7200, session_ttl=7200))
    assert not caught.value.retryable
    assert moto_assumed_roles() == []


@pytest.mark.server
def test_bad_values_and_missing_roles(aws_provider: AwsStsProvider) -> None:
    with pytest.raises(ManifestError, match="AssumeRole failed"):
        aws_provider.mint(parse({"role_arn": ROLE_ARN}), context(ttl=899))  # botocore's own minimum
    with pytest.raises(ProviderError, match="GetRole failed: NoSuchEntity"):
        aws_provider.mint(parse({"role_arn": f"arn:aws:iam::{ACCOUNT}:role/nope"}), context())
    with pytest.raises(ProviderError, match="not arn:aws:iam::123456789012:role/team/agent-ci"):
        aws_provider.mint(parse({"role_arn": f"arn:aws:iam::{ACCOUNT}:role/team/agent-ci"}), context())
    assert moto_assumed_roles() == []


@pytest.mark.server
def test_unreachable_endpoint_is_a_provider_error(aws_env: None) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = make_aws_provider(f"http://127.0.0.1:{port}", timeout=1)
    with pytest.raises(ProviderError, match="cannot reach") as caught:
        provider.mint(parse({"role_arn": ROLE_ARN}), context())
    assert caught.value.retryable
    fake = RevokeTarget(
        name="artifacts",
        reference={
            "role_arn": ROLE_ARN,
            "role_id": "AROAEXAMPLE",
            "role_session_name": "s-x.y",
            "assumed_role_id": "AROAEXAMPLE:s-x.y",
            "source_identity": "s-x",
        },
        expires_at=datetime.now(UTC) + timedelta(minutes=10),
    )
    with pytest.raises(ProviderError, match="cannot reach"):
        provider.revoke(fake, datetime.now(UTC))


@pytest.mark.server
def test_revoke_writes_the_deny_policy_and_is_idempotent(
    minted: tuple[AwsStsProvider, MintedCredential], aws_role: AwsRole
) -> None:
    """moto stores the Deny but would not enforce it per session; the stored document is the assertion."""
    provider, credential = minted
    assert provider.revoke(target(credential), datetime.now(UTC)) is RevokeOutcome.REVOKED
    first = deny_document(aws_role)
    deny = DenyList.parse(first)
    assert deny.values(SOURCE_IDENTITY) == ["s-4k2j9x7q3m1p"]
    assert deny.values(USERID) == []  # the source identity already names the session
    assert [s["Effect"] for s in first["Statement"]] == ["Deny"]
    assert all(s["Action"] == "*" and s["Resource"] == "*" for s in first["Statement"])

    puts = record_calls(provider, "iam", "PutRolePolicy")
    assert provider.revoke(target(credential), datetime.now(UTC)) is RevokeOutcome.REVOKED
    assert deny_document(aws_role) == first
    assert puts == []  # nothing to change, nothing written


def deny_applies(document: dict[str, Any] | None, request: dict[str, str]) -> bool:
    """Whether an explicit Deny of ``document`` hits every action of a session with these condition values.

    The broker's statements use StringEquals only (exact, case-sensitive, any
    listed value); anything else here fails the test rather than guess.
    """
    for statement in (document or {}).get("Statement", []):
        if statement.get("Effect") != "Deny" or statement.get("Action") != "*" or statement.get("Resource") != "*":
            continue
        condition = statement.get("Condition", {})
        assert set(condition) == {"StringEquals"}, condition
        for values in condition["StringEquals"].values():
            assert all("*" not in v and "?" not in v and "$" not in v for v in values)  # wildcard- and variable-free
        if all(request.get(key) in values for key, values in condition["StringEquals"].items()):
            return True
    return False


@pytest.mark.server
def test_the_deny_hits_exactly_the_revoked_sessions(aws_provider: AwsStsProvider, aws_role: AwsRole) -> None:
    """Each session's real condition values: aws:userid from GetCallerIdentity, SourceIdentity as sent."""
    import boto3

    sent = record_calls(aws_provider, "sts", "AssumeRole")
    minted = [aws_provider.mint(parse({"role_arn": ROLE_ARN}), context(f"s-exact{i}")) for i in range(3)]
    second = aws_provider.mint(replace(parse({"role_arn": ROLE_ARN}), name="other"), context("s-exact0"))
    requests = []
    for credential, call in zip([*minted, second], sent, strict=True):
        text = credential.files["credentials"]
        assert isinstance(text, Secret)
        keys = dict(line.split(" = ", 1) for line in text.reveal().splitlines()[1:])
        identity = boto3.client(
            "sts",
            region_name=REGION,
            endpoint_url=aws_role.endpoint_url,
            aws_access_key_id=keys["aws_access_key_id"],
            aws_secret_access_key=keys["aws_secret_access_key"],
            aws_session_token=keys["aws_session_token"],
        ).get_caller_identity()
        requests.append({"aws:userid": identity["UserId"], "aws:SourceIdentity": call["SourceIdentity"]})
    for credential in minted[:2]:
        assert aws_provider.revoke(target(credential), datetime.now(UTC)) is RevokeOutcome.REVOKED
    document = deny_document(aws_role)
    # Revoked: session 0 (both of its credentials) and session 1. Session 2 keeps working.
    assert [deny_applies(document, r) for r in requests] == [True, True, False, True]
    # A session chained from a revoked one back into the role keeps the source identity and is hit too;
    # a session of the role that the broker did not mint (another user id, no source identity) is not.
    chained = {"aws:userid": f"{aws_role.role_id}:agent-chose-this", "aws:SourceIdentity": "s-exact1"}
    outsider = {"aws:userid": f"{aws_role.role_id}:someone-else"}
    assert deny_applies(document, chained) and not deny_applies(document, outsider)


@pytest.mark.server
def test_concurrent_revocations_keep_both_entries(aws_provider: AwsStsProvider, aws_role: AwsRole) -> None:
    """Two broker processes (separate provider instances, no shared lock) revoke on one role at once."""
    credentials = [
        aws_provider.mint(parse({"role_arn": ROLE_ARN}), context(session_id=f"s-race{i}x")) for i in range(4)
    ]
    providers = [make_aws_provider(aws_role.endpoint_url, name=f"aws{i}") for i in range(2)]
    providers += [aws_provider, aws_provider]  # and two threads sharing one instance
    barrier = threading.Barrier(len(credentials))
    outcomes: list[RevokeOutcome | BaseException] = [RevokeOutcome.PENDING] * len(credentials)

    def run(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = providers[index].revoke(target(credentials[index]), datetime.now(UTC))
        except BaseException as exc:  # reported by the assertion below
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(credentials))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert outcomes == [RevokeOutcome.REVOKED] * len(credentials)
    assert denied(aws_role).values(SOURCE_IDENTITY) == sorted(f"s-race{i}x" for i in range(4))


@pytest.mark.server
def test_lost_update_is_detected_and_retried(aws_provider: AwsStsProvider, aws_role: AwsRole) -> None:
    """Another writer with a stale read overwrites the policy right after ours: the read-back catches it."""
    mine = aws_provider.mint(parse({"role_arn": ROLE_ARN}), context(session_id="s-mine01"))
    theirs = aws_provider.mint(parse({"role_arn": ROLE_ARN}), context(session_id="s-theirs"))
    stale = DenyList().merged(entries_for(theirs.reference["assumed_role_id"], "s-theirs", theirs.expires_at))
    puts = record_calls(aws_provider, "iam", "PutRolePolicy")

    def overwrite_once(**_: Any) -> None:
        if len(puts) == 1:
            iam_client(aws_role.endpoint_url).put_role_policy(
                RoleName=aws_role.name, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(stale.document())
            )

    aws_provider.clients.client("iam").meta.events.register("after-call.iam.PutRolePolicy", overwrite_once)
    assert aws_provider.revoke(target(mine), datetime.now(UTC)) is RevokeOutcome.REVOKED
    assert len(puts) == 2
    assert denied(aws_role).values(SOURCE_IDENTITY) == ["s-mine01", "s-theirs"]


@pytest.mark.server
def test_expired_entries_are_pruned(aws_provider: AwsStsProvider, aws_role: AwsRole) -> None:
    old = aws_provider.mint(parse({"role_arn": ROLE_ARN}), context(session_id="s-old001"))
    new = aws_provider.mint(parse({"role_arn": ROLE_ARN}), context(session_id="s-new001"))
    now = datetime.now(UTC)
    assert aws_provider.revoke(target(old), now) is RevokeOutcome.REVOKED
    # Three hours on: the old bucket (expiry + rounding, source identity + 1 h) has ended.
    later = now + timedelta(hours=3)
    assert aws_provider.revoke(target(new, later + timedelta(minutes=15)), later) is RevokeOutcome.REVOKED
    assert denied(aws_role).values(SOURCE_IDENTITY) == ["s-new001"]
    # An expired credential needs nothing, but its revoke still prunes: here down to an empty policy.
    much_later = later + timedelta(hours=5)
    assert aws_provider.revoke(target(new), much_later) is RevokeOutcome.EXPIRED
    names = iam_client(aws_role.endpoint_url).list_role_policies(RoleName=aws_role.name)["PolicyNames"]
    assert POLICY_NAME not in names


@pytest.mark.server
def test_budget_is_enforced_by_the_broker(aws_provider: AwsStsProvider, aws_role: AwsRole) -> None:
    """moto accepts oversized inline policies; the broker counts all of the role's inline policies itself."""
    iam = iam_client(aws_role.endpoint_url)
    resources = [f"arn:aws:s3:::{'b' * 60}/{i:03d}" for i in range(124)]
    resources.append("arn:aws:s3:::" + "p" * (10_240 - 120 - policy_size(policy(statement(Resource=resources)))))
    filler = policy(statement(Resource=resources))
    iam.put_role_policy(RoleName=aws_role.name, PolicyName="operator", PolicyDocument=json.dumps(filler, indent=4))
    assert 10_240 - 150 < policy_size(filler) < 10_240  # whitespace (indent) is not counted
    credential = aws_provider.mint(parse({"role_arn": ROLE_ARN}), context())
    with pytest.raises(ProviderError, match="10240") as caught:
        aws_provider.revoke(target(credential), datetime.now(UTC))
    assert caught.value.retryable  # stays pending: entries expire, room comes back
    assert POLICY_NAME not in iam.list_role_policies(RoleName=aws_role.name)["PolicyNames"]

    # Pruning makes room: a deny policy full of ended entries does not count against a new one.
    iam.delete_role_policy(RoleName=aws_role.name, PolicyName="operator")
    stale = DenyList()
    ended = datetime.now(UTC) - timedelta(hours=3)
    for i in range(250):
        session = f"s-stale{i:03d}-{'x' * 30}"
        stale = stale.merged(entries_for(f"{aws_role.role_id}:{session}.credential", session, ended))
    stale_document = stale.document()
    assert stale_document is not None and policy_size(stale_document) > 10_240
    iam.put_role_policy(RoleName=aws_role.name, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(stale_document))
    assert aws_provider.revoke(target(credential), datetime.now(UTC)) is RevokeOutcome.REVOKED
    assert denied(aws_role).values(SOURCE_IDENTITY) == ["s-4k2j9x7q3m1p"]


@pytest.mark.server
def test_revoke_expire_mode_reports_valid_until_expiry(aws_role: AwsRole) -> None:
    provider = make_aws_provider(aws_role.endpoint_url, revoke="expire")
    credential = provider.mint(parse({"role_arn": ROLE_ARN}), context())
    assert provider.revoke(target(credential), datetime.now(UTC)) is RevokeOutcome.VALID_UNTIL_EXPIRY
    assert provider.revoke(target(credential), credential.expires_at) is RevokeOutcome.EXPIRED
    assert iam_client(aws_role.endpoint_url).list_role_policies(RoleName=aws_role.name)["PolicyNames"] == []


@pytest.mark.server
def test_revoke_refuses_unusable_or_stale_references(
    minted: tuple[AwsStsProvider, MintedCredential], aws_role: AwsRole
) -> None:
    provider, credential = minted
    broken = RevokeTarget(name="artifacts", reference={"role_arn": ROLE_ARN}, expires_at=credential.expires_at)
    with pytest.raises(ProviderError, match="no usable session reference") as caught:
        provider.revoke(broken, datetime.now(UTC))
    assert not caught.value.retryable
    iam = iam_client(aws_role.endpoint_url)
    iam.delete_role(RoleName=aws_role.name)
    iam.create_role(RoleName=aws_role.name, AssumeRolePolicyDocument="{}")
    with pytest.raises(ProviderError, match="it was recreated"):
        provider.revoke(target(credential), datetime.now(UTC))


@pytest.mark.server
def test_canary_secrets_never_in_errors_or_reprs(aws_provider: AwsStsProvider, aws_role: AwsRole) -> None:
    """An AssumeRole answer naming another session is rejected: nothing secret comes out, and it is revocable."""
    seen: list[str] = []

    def another_session(parsed: dict[str, Any], **_: Any) -> None:
        credentials, user = parsed["Credentials"], parsed["AssumedRoleUser"]
        seen.extend([credentials["SecretAccessKey"], credentials["SessionToken"]])
        user["AssumedRoleId"] = user["AssumedRoleId"].split(":")[0] + ":someone-else"

    sts = aws_provider.clients.client("sts")
    sts.meta.events.register("after-call.sts.AssumeRole", another_session)
    with pytest.raises(ProviderError) as caught:
        aws_provider.mint(parse({"role_arn": ROLE_ARN}), context())
    error = caught.value
    assert "not handed out" in error.message
    assert isinstance(error, MintRejected)
    rejected = error.credential
    texts = [str(error), repr(error), error.message, repr(error.__cause__), repr(error.__context__), repr(rejected)]
    assert all(secret not in text for secret in seen for text in texts)
    # The session exists at AWS: the rejection carries what the core needs to deny it at once.
    assert (
        rejected.reference["assumed_role_id"]
        == f"{aws_role.role_id}:{role_session_name('s-4k2j9x7q3m1p', 'artifacts')}"
    )
    target = RevokeTarget(name="artifacts", reference=rejected.reference, expires_at=rejected.expires_at)
    assert aws_provider.revoke(target, datetime.now(UTC)) == RevokeOutcome.REVOKED
    assert denied(aws_role).values(SOURCE_IDENTITY) == ["s-4k2j9x7q3m1p"]

    assert seen
    sts.meta.events.unregister("after-call.sts.AssumeRole", another_session)
    credential = aws_provider.mint(parse({"role_arn": ROLE_ARN}), context(session_id="s-canary1"))
    secret = credential.secret.reveal()
    credentials_file = credential.files["credentials"]
    assert isinstance(credentials_file, Secret)
    token = credentials_file.reveal().split("aws_session_token = ")[1].strip()
    for text in (repr(credential), str(credential), repr(credential.files), json.dumps(dict(credential.reference))):
        assert secret not in text and token not in text
    assert secret not in json.dumps(credential.scope) and token not in str(credential.files["config"])
    with pytest.raises(BrokerError) as later:
        aws_provider.mint(parse({"role_arn": ROLE_ARN}), context(ttl=7200, session_ttl=7200))
    assert secret not in str(later.value) and token not in str(later.value)


@pytest.mark.server
def test_an_answer_naming_the_session_under_another_role_arn_is_rejected(aws_provider: AwsStsProvider) -> None:
    """The AssumeRole answer is the identity proof: its Arn must be this session of this role, as its id."""

    def elsewhere(parsed: dict[str, Any], **_: Any) -> None:
        user = parsed["AssumedRoleUser"]
        user["Arn"] = user["Arn"].replace(":assumed-role/", ":assumed-role/other-")

    aws_provider.clients.client("sts").meta.events.register("after-call.sts.AssumeRole", elsewhere)
    with pytest.raises(MintRejected, match="unexpected session"):
        aws_provider.mint(parse({"role_arn": ROLE_ARN}), context())
