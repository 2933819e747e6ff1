"""A refusal is an answer the AWS SDKs understand: boto3 raises ClientError with our code and message for S3
(``<Error>``) and for STS (``<ErrorResponse>``), and the message never carries a key or a token."""

from __future__ import annotations

import io
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

from broker.egress.injectors.sigv4 import Reason, Refusal, Verifier, error_response
from tests.fixtures.sigv4 import capture, client, make_keys

PLACEHOLDER = make_keys()


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = io.BytesIO(body)

    def stream(self, **_: Any) -> Any:
        yield self._body.read()


def answered(aws: Any, refusal: Refusal, host_service: str, call: Any) -> ClientError:
    """What boto3 raises when the proxy answers ``call`` with ``refusal``."""
    status, headers, body = error_response(refusal, host_service)

    def answer(request: Any, **_: Any) -> AWSResponse:
        return AWSResponse(request.url, status, {k.decode(): v.decode() for k, v in headers}, _Raw(body))

    aws.meta.events.register("before-send", answer)
    try:
        with pytest.raises(ClientError) as raised:
            call(aws)
    finally:
        aws.meta.events.unregister("before-send", answer)
    return raised.value


@pytest.mark.parametrize("reason", list(Reason))
def test_boto3_reads_every_refusal_from_s3_and_sts(reason: Reason) -> None:
    refusal = Refusal(reason, "a <reason> & more", None)
    s3 = client("s3", PLACEHOLDER, retries={"max_attempts": 1})
    error = answered(s3, refusal, "s3", lambda c: c.list_objects_v2(Bucket="b"))
    assert error.response["Error"]["Code"] == reason.s3_code
    assert error.response["Error"]["Message"] == "broker egress proxy: a <reason> & more"
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    sts = client("sts", PLACEHOLDER, retries={"max_attempts": 1})
    error = answered(sts, refusal, "sts", lambda c: c.get_caller_identity())
    assert error.response["Error"]["Code"] == reason.query_code
    assert error.response["Error"]["Message"] == "broker egress proxy: a <reason> & more"
    assert f"({reason.query_code})" in str(error) and "broker egress proxy" in str(error)


def test_the_signature_s_service_picks_the_shape() -> None:
    status, _, body = error_response(Refusal(Reason.SIGNATURE, "m", "sts"), host_service="s3")
    assert status == 403 and body.startswith(b"<ErrorResponse") and b"<Type>Sender</Type>" in body
    _, headers, body = error_response(Refusal(Reason.SIGNATURE, "m", "s3"), host_service="sts")
    assert body.startswith(b"<?xml") and b"<Error><Code>SignatureDoesNotMatch</Code>" in body
    assert (b"content-type", b"application/xml") in headers


def test_no_refusal_carries_the_keys_it_checked() -> None:
    real = make_keys()
    other = make_keys()
    heads = [
        capture(client("s3", other), lambda s3: s3.list_objects_v2(Bucket="b")).head,
        capture(
            client(
                "s3", type(PLACEHOLDER)(PLACEHOLDER.access_key_id, other.secret_access_key, PLACEHOLDER.session_token)
            ),
            lambda s3: s3.list_objects_v2(Bucket="b"),
        ).head,
        capture(
            client(
                "s3", type(PLACEHOLDER)(PLACEHOLDER.access_key_id, PLACEHOLDER.secret_access_key, other.session_token)
            ),
            lambda s3: s3.list_objects_v2(Bucket="b"),
        ).head,
    ]
    secrets = [k for keys in (PLACEHOLDER, real, other) for k in (keys.secret_access_key, keys.session_token) if k]
    for head in heads:
        refusal = Verifier(PLACEHOLDER, real).begin(head)
        assert isinstance(refusal, Refusal)
        _, _, body = error_response(refusal)
        for secret in secrets:
            assert secret.reveal_bytes() not in body
        assert real.access_key_id.encode() not in body and other.access_key_id.encode() not in body
