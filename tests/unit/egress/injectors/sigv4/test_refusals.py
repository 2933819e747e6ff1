"""Everything the SigV4 verifier cannot verify is refused, with the reason the client's SDK understands, and
nothing of it goes upstream: tampered heads and bodies, other keys and tokens, stale dates, SigV2 and SigV4A."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from broker.egress.injectors.sigv4 import Head, Reason, Refusal, RequestRefused, Verifier
from tests.fixtures.sigv4 import Captured, capture, client, header, make_keys, replace_header, through

PLACEHOLDER = make_keys()
REAL = make_keys()
DATA = b"0123456789abcdef" * 5000


def verdict(head: Head, **options: Any) -> Refusal:
    result = Verifier(PLACEHOLDER, REAL, **options).begin(head)
    assert isinstance(result, Refusal), "the verifier let it through"
    return result


def refused_body(captured: Captured, **options: Any) -> tuple[Refusal, bytes]:
    """The refusal raised while the body streams, and what had been released upstream before it."""
    passage = Verifier(PLACEHOLDER, REAL, **options).begin(captured.head)
    assert not isinstance(passage, Refusal), passage
    released = bytearray()
    with pytest.raises(RequestRefused) as refused:
        for start in range(0, len(captured.body), 5000):
            for part in passage.feed(captured.body[start : start + 5000]):
                released += part
        ending = passage.end()
        for part in ending.pieces:
            released += part
    return refused.value.refusal, bytes(released)


def list_request(**config: Any) -> Captured:
    return capture(client("s3", PLACEHOLDER, **config), lambda s3: s3.list_objects_v2(Bucket="bucket", Prefix="p/q"))


def hashed_put() -> Captured:
    s3 = client("s3", PLACEHOLDER, request_checksum_calculation="when_required")
    return capture(s3, lambda s3: s3.put_object(Bucket="bucket", Key="k", Body=DATA, ContentType="text/plain"))


def trailer_put() -> Captured:
    return capture(client("s3", PLACEHOLDER), lambda s3: s3.put_object(Bucket="bucket", Key="k", Body=DATA))


def sts_request() -> Captured:
    return capture(client("sts", PLACEHOLDER), lambda sts: sts.get_caller_identity())


def test_the_untampered_requests_pass() -> None:
    for captured in (list_request(), hashed_put(), trailer_put(), sts_request()):
        passage = Verifier(PLACEHOLDER, REAL).begin(captured.head)
        assert not isinstance(passage, Refusal), passage
        through(passage, captured.body)


TAMPERED_HEADS: dict[str, Callable[[Head], Head]] = {
    "a signed header's value": lambda h: replace_header(h, b"content-type", b"text/html"),
    "the path": lambda h: Head(h.method, h.target.replace(b"/bucket/k", b"/bucket/j"), h.headers),
    "the method": lambda h: Head(b"POST", h.target, h.headers),
    "a query parameter added": lambda h: Head(h.method, h.target + b"?acl", h.headers),
    "the Host": lambda h: replace_header(h, b"host", b"other.s3.us-east-1.amazonaws.com"),
    "the declared body hash": lambda h: replace_header(
        h, b"x-amz-content-sha256", hashlib.sha256(b"x").hexdigest().encode()
    ),
    "the signature itself": lambda h: replace_header(
        h, b"authorization", flip_last(header(h, b"authorization") or b"")
    ),
}


def flip_last(value: bytes) -> bytes:
    return value[:-1] + (b"1" if value.endswith(b"0") else b"0")


@pytest.mark.parametrize("name", sorted(TAMPERED_HEADS))
def test_a_tampered_head_is_refused_as_a_signature_mismatch(name: str) -> None:
    captured = hashed_put()
    refusal = verdict(TAMPERED_HEADS[name](captured.head))
    assert refusal.reason is Reason.SIGNATURE
    assert refusal.service == "s3"


def test_a_tampered_query_is_refused() -> None:
    captured = list_request()
    assert b"prefix=p%2Fq" in captured.head.target
    head = Head(
        captured.head.method, captured.head.target.replace(b"prefix=p%2Fq", b"prefix=p%2Fr"), captured.head.headers
    )
    assert verdict(head).reason is Reason.SIGNATURE


def test_a_changed_body_byte_is_refused_before_any_of_it_goes_upstream() -> None:
    captured = hashed_put()
    body = bytearray(captured.body)
    body[-3] ^= 1
    refusal, released = refused_body(Captured(captured.head, bytes(body)))
    assert refusal.reason is Reason.PAYLOAD_HASH and released == b""


def test_a_changed_sts_body_is_refused_before_anything_goes_upstream() -> None:
    captured = sts_request()
    refusal, released = refused_body(
        Captured(captured.head, captured.body.replace(b"GetCallerIdentity", b"GetSessionToken"))
    )
    assert refusal.reason is Reason.SIGNATURE and released == b""


def test_a_changed_byte_of_a_trailer_checksummed_upload_is_refused_before_its_last_chunk() -> None:
    captured = trailer_put()
    body = bytearray(captured.body)
    body[100] ^= 1  # a data byte of the first chunk; its CRC32 trailer no longer matches
    refusal, released = refused_body(Captured(captured.head, bytes(body)))
    assert refusal.reason is Reason.CHECKSUM
    assert b"x-amz-checksum-crc32" not in released and not released.endswith(b"\r\n\r\n")


def test_a_request_signed_with_another_key_id_is_refused() -> None:
    other = make_keys()
    captured = capture(client("s3", other), lambda s3: s3.list_objects_v2(Bucket="bucket"))
    assert verdict(captured.head).reason is Reason.FOREIGN_KEY


def test_the_placeholder_key_id_with_another_secret_is_a_signature_mismatch() -> None:
    impostor = make_keys()
    keys = type(PLACEHOLDER)(PLACEHOLDER.access_key_id, impostor.secret_access_key, PLACEHOLDER.session_token)
    captured = capture(client("s3", keys), lambda s3: s3.list_objects_v2(Bucket="bucket"))
    assert verdict(captured.head).reason is Reason.SIGNATURE


def test_a_wrong_or_missing_session_token_is_refused() -> None:
    wrong = type(PLACEHOLDER)(PLACEHOLDER.access_key_id, PLACEHOLDER.secret_access_key, make_keys().session_token)
    captured = capture(client("s3", wrong), lambda s3: s3.list_objects_v2(Bucket="bucket"))
    assert verdict(captured.head).reason is Reason.TOKEN
    none = type(PLACEHOLDER)(PLACEHOLDER.access_key_id, PLACEHOLDER.secret_access_key, None)
    captured = capture(client("s3", none), lambda s3: s3.list_objects_v2(Bucket="bucket"))
    assert verdict(captured.head).reason is Reason.TOKEN


@pytest.mark.parametrize("offset", [timedelta(minutes=16), timedelta(minutes=-16)])
def test_a_request_signed_more_than_15_minutes_from_now_is_refused(offset: timedelta) -> None:
    captured = list_request()
    refusal = verdict(captured.head, clock=lambda: datetime.now(UTC) + offset)
    assert refusal.reason is Reason.CLOCK
    passage = Verifier(PLACEHOLDER, REAL, clock=lambda: datetime.now(UTC) + offset / 2).begin(captured.head)
    assert not isinstance(passage, Refusal)  # within the window it passes


def presigned(expires: int = 600, **config: Any) -> Head:
    from urllib.parse import urlsplit

    s3 = client("s3", PLACEHOLDER, signature_version="s3v4", **config)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "bucket", "Key": "k"}, ExpiresIn=expires)
    parts = urlsplit(url)
    return Head(b"GET", f"{parts.path}?{parts.query}".encode(), ((b"host", parts.netloc.encode()),))


def test_an_expired_presigned_url_is_refused() -> None:
    head = presigned(expires=600)
    assert not isinstance(Verifier(PLACEHOLDER, REAL).begin(head), Refusal)
    later = verdict(head, clock=lambda: datetime.now(UTC) + timedelta(seconds=660))
    assert later.reason is Reason.EXPIRED


def test_a_tampered_presigned_url_is_refused() -> None:
    head = presigned()
    for old, new in ((b"/bucket/k?", b"/bucket/j?"), (b"X-Amz-Expires=600", b"X-Amz-Expires=6000")):
        assert verdict(Head(head.method, head.target.replace(old, new), head.headers)).reason is Reason.SIGNATURE


def test_a_sigv2_presigned_url_is_refused_with_the_setting_that_fixes_it() -> None:
    from urllib.parse import urlsplit

    s3 = client("s3", PLACEHOLDER)  # botocore presigns S3 with SigV2 unless told s3v4
    parts = urlsplit(s3.generate_presigned_url("get_object", Params={"Bucket": "bucket", "Key": "k"}))
    refusal = verdict(Head(b"GET", f"{parts.path}?{parts.query}".encode(), ((b"host", parts.netloc.encode()),)))
    assert refusal.reason is Reason.UNSUPPORTED and "s3v4" in refusal.message


def test_a_sigv2_header_is_refused() -> None:
    signature = base64.b64encode(b"x" * 20).decode()
    head = Head(
        b"GET",
        b"/bucket/k",
        ((b"host", b"s3.amazonaws.com"), (b"authorization", f"AWS {PLACEHOLDER.access_key_id}:{signature}".encode())),
    )
    assert verdict(head).reason is Reason.UNSUPPORTED


def test_sigv4a_is_refused_naming_what_is_not_supported() -> None:
    captured = list_request()
    authorization = header(captured.head, b"authorization") or b""
    v4a = authorization.replace(b"AWS4-HMAC-SHA256", b"AWS4-ECDSA-P256-SHA256").replace(b"/us-east-1/", b"/")
    head = replace_header(captured.head, b"authorization", v4a)
    head = Head(head.method, head.target, (*head.headers, (b"x-amz-region-set", b"*")))
    refusal = verdict(head)
    assert refusal.reason is Reason.UNSUPPORTED and "SigV4A" in refusal.message
    streaming = replace_header(captured.head, b"x-amz-content-sha256", b"STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD")
    assert "SigV4A" in verdict(streaming).message


def test_host_and_date_must_be_signed_and_every_x_amz_header_present() -> None:
    captured = list_request()
    authorization = header(captured.head, b"authorization") or b""
    no_host = replace_header(
        captured.head, b"authorization", authorization.replace(b"SignedHeaders=host;", b"SignedHeaders=")
    )
    assert verdict(no_host).reason is Reason.HEADERS
    extra = Head(captured.head.method, captured.head.target, (*captured.head.headers, (b"x-amz-acl", b"public-read")))
    refusal = verdict(extra)
    assert refusal.reason is Reason.HEADERS and "x-amz-acl" in refusal.message
    missing = Head(
        captured.head.method,
        captured.head.target,
        tuple(h for h in captured.head.headers if h[0].lower() != b"x-amz-security-token"),
    )
    assert verdict(missing).reason in (Reason.HEADERS, Reason.TOKEN)


def test_unsigned_and_doubly_signed_requests_are_refused() -> None:
    captured = list_request()
    bare = Head(
        captured.head.method,
        captured.head.target,
        tuple(h for h in captured.head.headers if h[0].lower() != b"authorization"),
    )
    assert verdict(bare).reason is Reason.UNSIGNED
    twice = Head(
        captured.head.method,
        captured.head.target,
        (*captured.head.headers, (b"authorization", header(captured.head, b"authorization") or b"")),
    )
    assert verdict(twice).reason is Reason.MALFORMED
    both = Head(captured.head.method, captured.head.target + b"&X-Amz-Signature=" + b"0" * 64, captured.head.headers)
    assert verdict(both).reason is Reason.MALFORMED


@pytest.mark.parametrize(
    "authorization",
    [
        b"AWS4-HMAC-SHA256 Credential=X",
        b"AWS4-HMAC-SHA256 Credential=ASIAAAAAAAAAAAAAAAAA/20260101/us-east-1/s3/aws4_request, Signature=" + b"0" * 64,
        b"AWS4-HMAC-SHA256 Credential=ASIAAAAAAAAAAAAAAAAA/20260101/us-east-1/s3/aws4_request, SignedHeaders=x-amz-date;host, Signature="
        + b"0" * 64,
        b"AWS4-HMAC-SHA256 Credential=ASIAAAAAAAAAAAAAAAAA/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=ZZ",
        b"AWS4-HMAC-SHA256 Credential=ASIAAAAAAAAAAAAAAAAA/2026/us-east-1/s3/aws4_request, SignedHeaders=host, Signature="
        + b"0" * 64,
        b"Bearer abc",
    ],
)
def test_malformed_authorization_headers_are_refused(authorization: bytes) -> None:
    head = Head(
        b"GET",
        b"/",
        ((b"host", b"s3.amazonaws.com"), (b"x-amz-date", b"20260101T000000Z"), (b"authorization", authorization)),
    )
    assert verdict(head).reason in (Reason.MALFORMED, Reason.UNSUPPORTED)


def test_a_body_over_the_spool_bound_is_refused(tmp_path: Any) -> None:
    from broker.egress.injectors.sigv4 import SpoolLimits

    refusal, released = refused_body(hashed_put(), spool_dir=tmp_path, spool=SpoolLimits(memory=4096, limit=50_000))
    assert refusal.reason is Reason.TOO_LARGE and released == b""
    refusal, released = refused_body(hashed_put(), spool=SpoolLimits(memory=4096))  # no directory: memory only
    assert refusal.reason is Reason.TOO_LARGE and released == b""
