"""The ``aws_sts`` provider revoking against a real moto server: the deny policy written on the role, exactly the
revoked sessions, concurrent and lost updates, pruning, the budget, expire mode and stale references.

moto stores the deny policy but enforces none of it (see ``test_mint.py``): these tests read back what the
broker wrote and evaluate it with ``deny_applies``, IAM's rule for the broker's statements.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from broker.vocab.errors import ProviderError
from broker.vocab.secret import Secret
from providers.aws.deny_policy.layout import POLICY_NAME, SOURCE_IDENTITY, USERID, DenyList, entries_for, policy_size
from providers.aws.provider import AwsStsProvider
from providers.base import MintedCredential, RevokeOutcome, RevokeTarget
from tests.fixtures.aws import REGION, ROLE_ARN, AwsRole, iam_client, make_aws_provider
from tests.fixtures.aws_sts import (
    context,
    denied,
    deny_applies,
    deny_document,
    parse,
    policy,
    record_calls,
    statement,
    target,
)


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
