"""The re-signer signs only the STS actions it lists, never one that answers with credentials, wherever a request
names its action (the query, the form body, ``X-Amz-Target``), and never S3's CreateSession; nothing of a refused
request is released. Requests are signed by botocore with the placeholder keys (offline)."""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from broker.egress.injectors.sigv4 import Reason, Refusal, RequestRefused, Verifier
from broker.egress.injectors.sigv4.actions import Actions, answers_with_credentials
from tests.fixtures.sigv4 import Captured, capture, client, make_keys, through, to_captured

PLACEHOLDER = make_keys()
REAL = make_keys()
STS = "https://sts.us-east-1.amazonaws.com/"
FORM = "application/x-www-form-urlencoded; charset=utf-8"


def signed(query: str = "", body: bytes = b"", method: str = "POST", **headers: str) -> Captured:
    """An STS request botocore signs with the placeholder keys, as given (query, body and headers)."""
    token = PLACEHOLDER.session_token.reveal() if PLACEHOLDER.session_token is not None else None
    credentials = Credentials(PLACEHOLDER.access_key_id, PLACEHOLDER.secret_access_key.reveal(), token)
    request = AWSRequest(method=method, url=STS + (f"?{query}" if query else ""), data=body, headers=headers)
    if body:
        request.headers["Content-Type"] = FORM
    SigV4Auth(credentials, "sts", "us-east-1").add_auth(request)
    return to_captured(request.prepare())


def outcome(captured: Captured, **options: Any) -> Refusal | bytes:
    """The refusal (on the head or once the body is in), or the body released upstream."""
    verdict = Verifier(PLACEHOLDER, REAL, **options).begin(captured.head)
    if isinstance(verdict, Refusal):
        return verdict
    assert verdict.head is None  # an STS request's head waits for its body
    try:
        return through(verdict, captured.body)[1]
    except RequestRefused as refused:
        return refused.refusal


def refused(captured: Captured, **options: Any) -> Refusal:
    result = outcome(captured, **options)
    assert isinstance(result, Refusal), "re-signed"
    return result


def test_assume_role_as_boto3_sends_it_is_refused_before_anything_is_released() -> None:
    sent = capture(
        client("sts", PLACEHOLDER),
        lambda sts: sts.assume_role(RoleArn="arn:aws:iam::123456789012:role/deploy", RoleSessionName="escape"),
    )
    verdict = Verifier(PLACEHOLDER, REAL).begin(sent.head)
    assert not isinstance(verdict, Refusal) and verdict.head is None
    released = bytearray()
    with pytest.raises(RequestRefused) as error:
        for piece in verdict.feed(sent.body):
            released += piece
        verdict.end()
    assert released == b""
    assert error.value.refusal.reason is Reason.ACTION and error.value.refusal.service == "sts"
    assert (
        error.value.refusal.message
        == "sts:AssumeRole answers with new credentials; the broker's proxy never re-signs it"
    )


def test_get_caller_identity_is_re_signed_by_default_and_only_what_is_listed() -> None:
    identity = capture(client("sts", PLACEHOLDER), lambda sts: sts.get_caller_identity())
    assert outcome(identity) == identity.body
    decode = signed(body=b"Action=DecodeAuthorizationMessage&EncodedMessage=abc&Version=2011-06-15")
    refusal = refused(decode)
    assert refusal.reason is Reason.ACTION and "(GetCallerIdentity: proxy_sts_actions)" in refusal.message
    widened = Actions(frozenset({"GetCallerIdentity", "DecodeAuthorizationMessage"}))
    assert outcome(decode, actions=widened) == decode.body
    assert refused(identity, actions=Actions(frozenset())).reason is Reason.ACTION  # none listed: no STS at all


@pytest.mark.parametrize(
    ("query", "body"),
    [
        ("Action=AssumeRole&Version=2011-06-15", b""),  # the query of a GET (or a presigned URL)
        ("", b"Version=2011-06-15&Action=GetCallerIdentity&Action=AssumeRole"),  # twice in the body
        ("Action=GetCallerIdentity", b"Action=GetCallerIdentity&Version=2011-06-15"),  # the query and the body
        ("", b"Version=2011-06-15;Action=AssumeRole&Action=GetCallerIdentity"),  # ";" as a separator
        ("", b"action=AssumeRole&Version=2011-06-15"),  # another case of the name
        ("", b"Act%69on=AssumeRole&Version=2011-06-15"),  # the name percent-encoded
        ("", b"Action=getcalleridentity&Version=2011-06-15"),  # the action in another case
        ("", b"Version=2011-06-15"),  # no action at all
    ],
)
def test_every_way_of_naming_an_action_is_read(query: str, body: bytes) -> None:
    assert refused(signed(query, body, method="GET" if not body else "POST")).reason is Reason.ACTION


def test_the_json_protocols_target_counts_and_an_encoded_or_unhashed_body_is_refused() -> None:
    target = signed(body=b"Action=GetCallerIdentity&Version=2011-06-15", **{"X-Amz-Target": "AWSSTS.AssumeRole"})
    assert refused(target).reason is Reason.ACTION
    gzip = signed(body=b"Action=GetCallerIdentity&Version=2011-06-15", **{"Content-Encoding": "gzip"})
    assert refused(gzip).message == "an STS request body may not be encoded; send it as a plain form"
    unhashed = signed(body=b"Action=AssumeRole&Version=2011-06-15", **{"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"})
    assert refused(unhashed).reason is Reason.ACTION


def test_s3_create_session_is_refused_on_its_head() -> None:
    for addressing in ("virtual", "path"):
        s3 = client("s3", PLACEHOLDER, s3={"addressing_style": addressing})
        sent = capture(s3, lambda aws: aws.create_session(Bucket="b--use1-az4--x-s3"))
        refusal = refused(sent)
        assert (refusal.reason, refusal.service) == (Reason.ACTION, "s3express")
        assert refusal.message.startswith("S3 CreateSession answers with new credentials")
    listed = capture(client("s3", PLACEHOLDER), lambda s3: s3.list_objects_v2(Bucket="bucket", Prefix="session"))
    assert not isinstance(Verifier(PLACEHOLDER, REAL).begin(listed.head), Refusal)  # a value named so is no matter


def sts_operations() -> list[tuple[str, bool]]:
    """Every STS operation botocore knows, and whether its answer carries credentials or a token."""
    model = botocore.session.get_session().get_service_model("sts")
    found = []
    for name in model.operation_names:
        output = model.operation_model(name).output_shape
        members = set(output.members) if output is not None else set()
        found.append((name, "Credentials" in members or any(m.endswith("Token") for m in members)))
    return found


@pytest.mark.parametrize(("action", "mints"), sts_operations())
def test_each_sts_action_that_answers_with_credentials_can_never_be_listed(action: str, mints: bool) -> None:
    if mints:
        assert answers_with_credentials(action)
        with pytest.raises(ValueError, match=action):
            Actions(frozenset({action}))
    assert answers_with_credentials(action) == (mints or action.lower().startswith("assume"))
