"""The ``aws_sts`` provider's deny-policy model, without a server: hour buckets, the entries document and its
budget on the role, role session names, and error messages scrubbed to one line.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from broker.vocab.errors import ManifestError, ProviderError
from broker.vocab.secret import Secret
from providers.aws.deny_policy.layout import (
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
from tests.fixtures.aws import make_aws_provider

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
