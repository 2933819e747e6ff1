"""The ``aws_sts`` provider minting against a real moto server: the files it writes and the narrowed AssumeRole
it sends, expiry, refusals before AssumeRole, and an answer naming another session.

moto emulates the STS and IAM APIs but enforces no IAM at all: it ignores
trust policies, session policies, tags, SourceIdentity, MaxSessionDuration
and the 10,240-character inline-policy budget. The server tests therefore
assert what the broker sends (captured from botocore's parameters or read
from moto's backend) and what it stores (read back with GetRolePolicy), not
whether AWS would deny a revoked session.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from broker.vocab.errors import BrokerError, ManifestError, ProviderError
from broker.vocab.secret import Secret
from providers.aws.deny_policy.layout import SOURCE_IDENTITY
from providers.aws.names import role_session_name
from providers.aws.provider import AwsStsProvider
from providers.base import MintRejected, RevokeOutcome, RevokeTarget
from tests.fixtures.aws import ACCOUNT, REGION, ROLE_ARN, AwsRole, make_aws_provider
from tests.fixtures.aws_sts import S3_READ, context, denied, parse, record_calls


def moto_assumed_roles() -> list[Any]:
    from moto.sts.models import sts_backends

    roles: list[Any] = sts_backends[ACCOUNT]["aws"].assumed_roles
    return roles


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
def test_a_proxied_credential_is_assumed_with_a_deny_of_new_credentials(aws_provider: AwsStsProvider) -> None:
    """``inject: proxy``: the session policy AWS holds denies minting credentials (the digest covers what is sent)."""
    narrowed = parse({"role_arn": ROLE_ARN, "session_policy": S3_READ})
    minted = aws_provider.mint(narrowed, replace(context(), proxied=True))
    (recorded,) = moto_assumed_roles()
    assert recorded.policy == narrowed.sent_policy_json(True) != narrowed.policy_json
    assert json.loads(recorded.policy)["Statement"][-1]["Effect"] == "Deny"
    assert minted.reference["policy_digest"] == "sha256:" + hashlib.sha256(recorded.policy.encode()).hexdigest()


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
