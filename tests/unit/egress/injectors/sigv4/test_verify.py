"""The SigV4 verifier against requests botocore itself signs: each payload mode passes and comes out re-signed,
and the re-signed request verifies with the real secret (the same verifier, keyed with the real keys)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote_to_bytes, urlsplit

import pytest

from broker.egress.injectors.sigv4 import AwsKeys, Head, PayloadMode, Refusal, Verifier
from tests.fixtures.sigv4 import Captured, capture, client, forward, header, make_keys

PLACEHOLDER = make_keys()
REAL = make_keys(token_length=412)
OTHER = make_keys()
DATA = bytes(range(256)) * 300 + b"tail"  # 76,804 bytes: several pieces, more than one aws-chunked chunk


def verifier(placeholder: AwsKeys = PLACEHOLDER, real: AwsKeys = REAL, **options: Any) -> Verifier:
    return Verifier(placeholder, real, **options)


def resigned(captured: Captured) -> tuple[Head, bytes]:
    """Forwarded by the placeholder's verifier, then checked by a verifier holding the real keys."""
    head, body = forward(verifier(), captured)
    _, again_body = forward(Verifier(REAL, OTHER), Captured(head, body))
    assert again_body == body
    return head, body


def assert_real_keys_only(head: Head) -> None:
    text = unquote_to_bytes(head.target) + b"".join(name + b":" + value for name, value in head.headers)
    assert PLACEHOLDER.access_key_id.encode() not in text
    assert PLACEHOLDER.session_token is not None and PLACEHOLDER.session_token.reveal_bytes() not in text
    assert REAL.access_key_id.encode() in text
    assert REAL.session_token is not None and REAL.session_token.reveal_bytes() in text


S3_CALLS: dict[str, tuple[dict[str, Any], Callable[[Any], object], PayloadMode]] = {
    "put_object, botocore defaults (aws-chunked, CRC32 trailer)": (
        {},
        lambda s3: s3.put_object(Bucket="bucket", Key="dir/a b+c~é.txt", Body=DATA),
        PayloadMode.UNSIGNED_TRAILER,
    ),
    "upload_part, botocore defaults": (
        {},
        lambda s3: s3.upload_part(Bucket="bucket", Key="big", UploadId="u-1", PartNumber=2, Body=DATA),
        PayloadMode.UNSIGNED_TRAILER,
    ),
    "put_object, checksums when required (signed body hash)": (
        {"request_checksum_calculation": "when_required"},
        lambda s3: s3.put_object(Bucket="bucket", Key="k", Body=DATA, Metadata={"who": "agent"}),
        PayloadMode.HASHED,
    ),
    "put_object, payload signing off": (
        {"request_checksum_calculation": "when_required", "s3": {"payload_signing_enabled": False}},
        lambda s3: s3.put_object(Bucket="bucket", Key="k", Body=DATA),
        PayloadMode.UNSIGNED,
    ),
    "list_objects_v2 with an encoded prefix": (
        {},
        lambda s3: s3.list_objects_v2(Bucket="bucket", Prefix="a/b c+d/é", MaxKeys=7),
        PayloadMode.HASHED,
    ),
    "get_object with a range": (
        {},
        lambda s3: s3.get_object(Bucket="bucket", Key="x/y z", Range="bytes=0-9"),
        PayloadMode.HASHED,
    ),
    "create_multipart_upload (?uploads)": (
        {},
        lambda s3: s3.create_multipart_upload(Bucket="bucket", Key="big"),
        PayloadMode.HASHED,
    ),
    "delete_objects (a POST body with Content-MD5 or a checksum)": (
        {},
        lambda s3: s3.delete_objects(Bucket="bucket", Delete={"Objects": [{"Key": "a"}, {"Key": "b"}]}),
        PayloadMode.HASHED,
    ),
}


@pytest.mark.parametrize("name", sorted(S3_CALLS))
def test_s3_requests_botocore_signs_pass_and_come_out_signed_with_the_real_keys(name: str) -> None:
    config, call, mode = S3_CALLS[name]
    captured = capture(client("s3", PLACEHOLDER, **config), call)
    passage = verifier().begin(captured.head)
    assert not isinstance(passage, Refusal), passage
    assert passage.mode is mode
    passage.close()
    head, body = resigned(captured)
    assert body == captured.body  # no payload mode changes the bytes (chunk signatures aside)
    assert head.method == captured.head.method and head.target == captured.head.target
    assert [name for name, _ in head.headers] == [name for name, _ in captured.head.headers]
    assert_real_keys_only(head)


def test_a_hashed_body_is_held_until_it_matches_its_hash() -> None:
    captured = capture(
        client("s3", PLACEHOLDER, request_checksum_calculation="when_required"),
        lambda s3: s3.put_object(Bucket="bucket", Key="k", Body=DATA),
    )
    passage = verifier().begin(captured.head)  # the signature checks at once (the hash is declared)...
    assert not isinstance(passage, Refusal)
    assert passage.head is None  # ...but nothing goes, not even the head, before the whole body matched
    assert all(list(passage.feed(captured.body[i : i + 4096])) == [] for i in range(0, len(captured.body), 4096))
    ending = passage.end()
    assert ending.head is not None and header(ending.head, b"authorization") != header(captured.head, b"authorization")
    assert b"".join(ending.pieces) == captured.body
    passage.close()


def test_sts_get_caller_identity_waits_for_its_body_then_is_re_signed() -> None:
    captured = capture(client("sts", PLACEHOLDER), lambda sts: sts.get_caller_identity())
    assert header(captured.head, b"x-amz-content-sha256") is None  # the body hash is only in the signature
    passage = verifier().begin(captured.head)
    assert not isinstance(passage, Refusal)
    assert passage.head is None and passage.mode is PayloadMode.HASHED
    assert list(passage.feed(captured.body)) == []
    ending = passage.end()
    assert ending.head is not None
    assert b"".join(ending.pieces) == captured.body
    passage.close()
    head, _ = resigned(captured)
    assert_real_keys_only(head)
    authorization = header(head, b"authorization")
    assert authorization is not None
    assert authorization.startswith(b"AWS4-HMAC-SHA256 Credential=" + REAL.access_key_id.encode() + b"/")
    assert b"/us-east-1/sts/aws4_request, SignedHeaders=" in authorization


def test_a_presigned_get_is_verified_and_presigned_again_with_the_real_keys() -> None:
    s3 = client("s3", PLACEHOLDER, signature_version="s3v4")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "bucket", "Key": "a b/é"}, ExpiresIn=600)
    parts = urlsplit(url)
    target = f"{parts.path}?{parts.query}".encode()
    captured = Captured(Head(b"GET", target, ((b"host", parts.netloc.encode()), (b"user-agent", b"curl/8"))), b"")
    head, _ = resigned(captured)
    query = parse_qs(urlsplit(head.target.decode()).query)
    assert query["X-Amz-Credential"][0].startswith(REAL.access_key_id + "/")
    assert REAL.session_token is not None and query["X-Amz-Security-Token"] == [REAL.session_token.reveal()]
    assert query["X-Amz-Expires"] == ["600"]
    assert urlsplit(head.target.decode()).path == parts.path
    assert_real_keys_only(head)


def test_what_the_re_signed_request_carries_is_what_was_signed() -> None:
    captured = capture(
        client("s3", PLACEHOLDER, request_checksum_calculation="when_required"),
        lambda s3: s3.put_object(Bucket="bucket", Key="k", Body=b"hello", ContentType="text/plain"),
    )
    head, body = forward(verifier(), captured)
    assert body == b"hello"
    for name, value in captured.head.headers:
        if name.lower() not in (b"authorization", b"x-amz-security-token"):
            assert header(head, name.lower()) == value
    sha = header(head, b"x-amz-content-sha256")
    assert sha == hashlib.sha256(b"hello").hexdigest().encode()


OTHER_SERVICES: dict[str, Callable[[Any], object]] = {
    # rest-json: botocore encodes the path and the canonical URI encodes it again (not S3's rule)
    "lambda": lambda aws: aws.invoke(
        FunctionName="arn:aws:lambda:us-east-1:123456789012:function:f:live", Payload=b"{}"
    ),
    "dynamodb": lambda aws: aws.get_item(TableName="t", Key={"k": {"S": "v"}}),  # json, X-Amz-Target signed
    "iam": lambda aws: aws.list_users(PathPrefix="/a b/"),  # query protocol, POST form body
}


@pytest.mark.parametrize("service", sorted(OTHER_SERVICES))
def test_other_services_canonical_rules_are_botocore_s(service: str) -> None:
    captured = capture(client(service, PLACEHOLDER), OTHER_SERVICES[service])
    if service == "lambda":
        assert b"%3A" in captured.head.target  # the path as sent is encoded once; it is signed encoded twice
    head, body = resigned(captured)
    assert body == captured.body
    assert_real_keys_only(head)
