"""AWS's published SigV4 examples, verified by the broker's SigV4 verifier byte for byte.

Provenance (the example credentials AWS publishes for these pages, ``tests.fixtures.sigv4.PUBLISHED_KEY_ID`` and
``PUBLISHED_SECRET``, at 20130524T000000Z, us-east-1, s3):
- header auth, "Signature Calculations for the Authorization Header: Transferring Payload in a Single Chunk",
  https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html (GET Object f0e8bdb8...,
  PUT Object 98ad7217..., GET Bucket Lifecycle fea454ca..., Get Bucket (List Objects) 34b48302...);
- presigned URL, "Authenticating Requests: Using Query Parameters",
  https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html (aeeed9bb...);
- aws-chunked, "Signature Calculations for the Authorization Header: Transferring Payload in Multiple Chunks",
  https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-streaming.html (seed 4f232c43..., chunks ad80c730...,
  0055627c..., final b6c6ea8a...);
- the trailer signature over the trailers first:1st, second:2nd, third:3rd chained after that final chunk
  (df5735bd...) is the vector of AWS's own signing library, awslabs/aws-c-auth tests/sigv4_signing_tests.c
  (sigv4_trailing_headers_signing_test), which follows "Signature Calculations for the Authorization Header:
  Including Trailing Headers", https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-streaming-trailers.html.
The same values appear in AWS's SDK test suites (aws-crt-java, aws-crt-dotnet, smithy-swift).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from broker.egress.injectors.sigv4 import AwsKeys, Head, Reason, Refusal, Verifier
from broker.egress.injectors.sigv4.chain import ChunkChain
from broker.egress.injectors.sigv4.values import Scope
from broker.vocab.secret import Secret
from tests.fixtures.sigv4 import PUBLISHED_KEY_ID, PUBLISHED_SECRET, Captured, forward, make_keys

EXAMPLE = AwsKeys(PUBLISHED_KEY_ID, Secret(PUBLISHED_SECRET))
OURS_KEY_ID = "AKIA" + "OURS0000EXAMPLE0"
OURS = AwsKeys(OURS_KEY_ID, Secret("x" * 40))
WHEN = datetime(2013, 5, 24, tzinfo=UTC)
STAMP = "20130524T000000Z"
EMPTY = hashlib.sha256(b"").hexdigest()
CREDENTIAL = f"{PUBLISHED_KEY_ID}/20130524/us-east-1/s3/aws4_request"
SEED = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
CHUNKS = (
    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
)
TRAILER = "df5735bd9f3295cd9386572292562fefc93ba94e80a0a1ddcbd652c4e0a75e6c"


def example_verifier(real: AwsKeys = OURS) -> Verifier:
    return Verifier(EXAMPLE, real, clock=lambda: WHEN)


def authorization(signed: str, signature: str) -> bytes:
    return f"AWS4-HMAC-SHA256 Credential={CREDENTIAL},SignedHeaders={signed},Signature={signature}".encode()


HEADER_EXAMPLES = {
    "GET Object": (
        b"GET",
        b"/test.txt",
        [(b"range", b"bytes=0-9"), (b"x-amz-content-sha256", EMPTY.encode())],
        "host;range;x-amz-content-sha256;x-amz-date",
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
        b"",
    ),
    "PUT Object": (
        b"PUT",
        b"/test%24file.text",
        [
            (b"date", b"Fri, 24 May 2013 00:00:00 GMT"),
            (b"x-amz-storage-class", b"REDUCED_REDUNDANCY"),
            (b"x-amz-content-sha256", b"44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"),
        ],
        "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
        "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
        b"Welcome to Amazon S3.",
    ),
    "GET Bucket Lifecycle": (
        b"GET",
        b"/?lifecycle",
        [(b"x-amz-content-sha256", EMPTY.encode())],
        "host;x-amz-content-sha256;x-amz-date",
        "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
        b"",
    ),
    "Get Bucket (List Objects)": (
        b"GET",
        b"/?max-keys=2&prefix=J",
        [(b"x-amz-content-sha256", EMPTY.encode())],
        "host;x-amz-content-sha256;x-amz-date",
        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
        b"",
    ),
}


def example_head(name: str, signature: str | None = None) -> tuple[Head, bytes]:
    method, target, headers, signed, published, body = HEADER_EXAMPLES[name]
    all_headers = [(b"host", b"examplebucket.s3.amazonaws.com"), (b"x-amz-date", STAMP.encode()), *headers]
    all_headers.append((b"authorization", authorization(signed, signature or published)))
    return Head(method, target, tuple(all_headers)), body


@pytest.mark.parametrize("name", sorted(HEADER_EXAMPLES))
def test_the_published_header_examples_verify_and_a_changed_signature_does_not(name: str) -> None:
    head, body = example_head(name)
    out_head, out_body = forward(example_verifier(), Captured(head, body))
    assert out_body == body
    forward(Verifier(OURS, EXAMPLE, clock=lambda: WHEN), Captured(out_head, out_body))  # re-signed: checks with ours
    wrong = example_head(name, signature="0" * 64)[0]
    refusal = example_verifier().begin(wrong)
    assert isinstance(refusal, Refusal) and refusal.reason is Reason.SIGNATURE


def test_the_published_presigned_url_verifies_until_it_expires() -> None:
    target = (
        "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential={PUBLISHED_KEY_ID}%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
    )
    head = Head(b"GET", target.encode(), ((b"host", b"examplebucket.s3.amazonaws.com"),))
    out_head, _ = forward(example_verifier(), Captured(head, b""))
    assert f"X-Amz-Credential={OURS_KEY_ID}%2F20130524%2Fus-east-1%2Fs3%2Faws4_request".encode() in out_head.target
    forward(Verifier(OURS, EXAMPLE, clock=lambda: WHEN), Captured(out_head, b""))
    late = Verifier(EXAMPLE, OURS, clock=lambda: datetime(2013, 5, 25, 0, 0, 1, tzinfo=UTC)).begin(head)
    assert isinstance(late, Refusal) and late.reason is Reason.EXPIRED


def test_the_chunk_chain_gives_the_published_chunk_and_trailer_signatures() -> None:
    chain = ChunkChain(EXAMPLE, Scope("20130524", "us-east-1", "s3"), STAMP, SEED)
    assert chain.chunk(hashlib.sha256(b"a" * 65536).hexdigest()) == CHUNKS[0]
    assert chain.chunk(hashlib.sha256(b"a" * 1024).hexdigest()) == CHUNKS[1]
    assert chain.chunk(EMPTY) == CHUNKS[2]
    assert chain.trailer([("first", "1st"), ("second", "2nd"), ("third", "3rd")]) == TRAILER


def streaming_example() -> Captured:
    head = Head(
        b"PUT",
        b"/examplebucket/chunkObject.txt",
        (
            (b"host", b"s3.amazonaws.com"),
            (b"x-amz-date", STAMP.encode()),
            (b"x-amz-storage-class", b"REDUCED_REDUNDANCY"),
            (
                b"authorization",
                authorization(
                    "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
                    "x-amz-decoded-content-length;x-amz-storage-class",
                    SEED,
                ),
            ),
            (b"x-amz-content-sha256", b"STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
            (b"content-encoding", b"aws-chunked"),
            (b"x-amz-decoded-content-length", b"66560"),
            (b"content-length", b"66824"),
        ),
    )
    body = b"".join(
        b"%x;chunk-signature=%s\r\n%s\r\n" % (size, signature.encode(), b"a" * size)
        for size, signature in zip((65536, 1024, 0), CHUNKS, strict=True)
    )
    assert len(body) == 66824
    return Captured(head, body)


@pytest.mark.parametrize("piece", [1, 333, 65536, 100_000])
def test_the_published_streaming_upload_verifies_and_comes_out_chained_under_the_real_key(piece: int) -> None:
    example = streaming_example()
    out_head, out_body = forward(example_verifier(), example, piece)
    assert len(out_body) == len(example.body)  # the same length: the Content-Length holds
    assert out_body.replace(b"a", b"") != example.body.replace(b"a", b"")  # new signatures
    forward(Verifier(OURS, make_keys_without_token(), clock=lambda: WHEN), Captured(out_head, out_body))


def make_keys_without_token() -> AwsKeys:
    keys = make_keys()
    return AwsKeys(keys.access_key_id, keys.secret_access_key)


def test_a_changed_chunk_of_the_published_upload_is_refused() -> None:
    example = streaming_example()
    body = bytearray(example.body)
    body[70_000 - 3500] ^= 1  # inside the second chunk's data
    passage = example_verifier().begin(example.head)
    assert not isinstance(passage, Refusal)
    from broker.egress.injectors.sigv4 import RequestRefused

    released = bytearray()
    with pytest.raises(RequestRefused) as refused:
        for part in passage.feed(bytes(body)):
            released += part
    assert refused.value.refusal.reason is Reason.CHUNK
    assert released == b""  # the refusal comes before anything of that piece goes out
