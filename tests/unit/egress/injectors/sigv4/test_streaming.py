"""aws-chunked uploads through the SigV4 verifier: every chunk signature checked in the placeholder's chain and
written again in the real one, the trailers checked, nothing of a bad chunk released, memory bounded.

The chunk signatures of the requests made here come from tests/fixtures/sigv4_chunks.py, written from AWS's
formula (checked against AWS's published example first), not from the code under test; botocore signs the heads.
"""

from __future__ import annotations

import hashlib
import os
import tracemalloc
from pathlib import Path

import pytest

from broker.egress.injectors.sigv4 import AwsKeys, Reason, Refusal, RequestRefused, SpoolLimits, Verifier
from tests.fixtures.sigv4 import Captured, forward, header, make_keys
from tests.fixtures.sigv4_chunks import chunk_signature, crc32, signed_upload, signing_key, trailer_signature
from tests.unit.egress.injectors.sigv4.test_examples import EXAMPLE

PLACEHOLDER = make_keys()
REAL = make_keys()
EMPTY = hashlib.sha256(b"").hexdigest()


def test_the_signer_of_these_tests_gives_aws_published_chunk_signatures() -> None:
    key, stamp = signing_key(EXAMPLE, "20130524"), "20130524T000000Z"  # AWS's published example keys
    seed = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
    first = chunk_signature(key, stamp, seed, b"a" * 65536)
    assert first == "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"


DATA = os.urandom(200_000).replace(b"\r", b"\x00")  # no CRLF inside: the checks below strip the framing's


@pytest.mark.parametrize("trailer", [False, True])
@pytest.mark.parametrize("piece", [1000, 65536, 300_000])
def test_a_signed_streaming_upload_comes_out_chained_under_the_real_key(trailer: bool, piece: int) -> None:
    upload = signed_upload(DATA, keys=PLACEHOLDER, trailer=trailer)
    head, body = forward(Verifier(PLACEHOLDER, REAL), upload, piece)
    assert len(body) == len(upload.body) and body != upload.body
    assert body.replace(b"\r\n", b"").count(DATA[:1000]) == 1
    forward(Verifier(REAL, make_keys()), Captured(head, body))  # the verifier itself accepts the real chain
    # and so does this file's own chain, seeded with the new Authorization's signature
    expected = signed_upload(DATA, trailer=trailer, keys=REAL)
    seed = (header(head, b"authorization") or b"").decode().rpartition("Signature=")[2]
    stamp = (header(head, b"x-amz-date") or b"").decode()
    key, previous = signing_key(REAL, stamp[:8]), seed
    for piece_data in [DATA[i : i + 65536] for i in range(0, len(DATA), 65536)] + [b""]:
        previous = chunk_signature(key, stamp, previous, piece_data)
        assert b";chunk-signature=" + previous.encode() in body
    if trailer:
        line = f"x-amz-checksum-crc32:{crc32(DATA)}"
        assert f"x-amz-trailer-signature:{trailer_signature(key, stamp, previous, line + chr(10))}".encode() in body
    assert expected.head.target == head.target


def released_before_refusal(upload: Captured, piece: int = 10_000, **options: object) -> tuple[Refusal, bytes]:
    passage = Verifier(PLACEHOLDER, REAL, **options).begin(upload.head)  # type: ignore[arg-type]
    assert not isinstance(passage, Refusal), passage
    released = bytearray()
    with pytest.raises(RequestRefused) as refused:
        for start in range(0, len(upload.body), piece):
            for part in passage.feed(upload.body[start : start + piece]):
                released += part
        passage.end()
    return refused.value.refusal, bytes(released)


def test_a_changed_byte_in_a_chunk_stops_the_upload_at_that_chunk() -> None:
    upload = signed_upload(DATA, keys=PLACEHOLDER)
    body = bytearray(upload.body)
    body[70_000] ^= 1  # in the second chunk
    refusal, released = released_before_refusal(Captured(upload.head, bytes(body)))
    assert refusal.reason is Reason.CHUNK and "chunk 2" in refusal.message
    assert DATA[:65536] in released and DATA[65536 : 65536 + 1000] not in released


def test_chunks_out_of_order_or_signed_with_another_key_are_refused() -> None:
    upload = signed_upload(DATA, keys=PLACEHOLDER)
    first, second = upload.body[: 65536 + 88], upload.body[65536 + 88 : 2 * (65536 + 88)]
    swapped = second + first + upload.body[2 * (65536 + 88) :]
    assert released_before_refusal(Captured(upload.head, swapped))[0].reason is Reason.CHUNK
    foreign = signed_upload(
        DATA, keys=AwsKeys(PLACEHOLDER.access_key_id, make_keys().secret_access_key, PLACEHOLDER.session_token)
    )
    assert Verifier(PLACEHOLDER, REAL).begin(foreign.head).reason is Reason.SIGNATURE  # type: ignore[union-attr]
    mixed = Captured(upload.head, upload.body[: 65536 + 88] + foreign.body[65536 + 88 :])
    assert released_before_refusal(mixed)[0].reason is Reason.CHUNK


def test_a_truncated_or_overlong_or_misframed_body_is_refused() -> None:
    upload = signed_upload(DATA, keys=PLACEHOLDER)
    refusal, released = released_before_refusal(Captured(upload.head, upload.body[:-90]))
    assert refusal.reason is Reason.CHUNK and not released.endswith(b"\r\n\r\n")
    assert released_before_refusal(Captured(upload.head, upload.body + b"x"))[0].reason is Reason.CHUNK
    unsigned_chunk = upload.body.replace(b";chunk-signature=", b";chunk-signaturX=", 1)
    assert released_before_refusal(Captured(upload.head, unsigned_chunk))[0].reason is Reason.CHUNK


def test_a_decoded_length_other_than_the_body_is_refused_before_the_last_chunk() -> None:
    upload = signed_upload(DATA, keys=PLACEHOLDER, decoded=len(DATA) + 1)
    refusal, released = released_before_refusal(upload)
    assert refusal.reason is Reason.CHUNK and b"\r\n0;chunk-signature=" not in released


def test_a_trailer_with_a_wrong_signature_or_checksum_is_refused_and_held_back() -> None:
    upload = signed_upload(DATA, keys=PLACEHOLDER, trailer=True)
    head, _, tail = upload.body.rpartition(b"x-amz-trailer-signature:")
    forged = head + b"x-amz-trailer-signature:" + (b"0" * 64) + tail[64:]
    refusal, released = released_before_refusal(Captured(upload.head, forged))
    assert refusal.reason is Reason.CHUNK and b"x-amz-checksum-crc32" not in released
    wrong = signed_upload(DATA, keys=PLACEHOLDER, trailer=True, checksum=crc32(b"other"))  # signed, but not the body's
    refusal, released = released_before_refusal(wrong)
    assert refusal.reason is Reason.CHECKSUM and b"\r\n0;chunk-signature=" not in released


def test_a_chunk_larger_than_the_memory_bound_is_spooled_to_a_file_with_no_name(tmp_path: Path) -> None:
    upload = signed_upload(DATA, keys=PLACEHOLDER, size=150_000)
    passage = Verifier(PLACEHOLDER, REAL, spool_dir=tmp_path, spool=SpoolLimits(memory=32 * 1024)).begin(upload.head)
    assert not isinstance(passage, Refusal)
    out = bytearray()
    with passage:
        for start in range(0, len(upload.body), 50_000):
            for part in passage.feed(upload.body[start : start + 50_000]):
                out += part
            assert list(tmp_path.iterdir()) == []  # the spool file has no name
        out += b"".join(passage.end().pieces)
    assert len(out) == len(upload.body)
    too_big = Verifier(PLACEHOLDER, REAL, spool=SpoolLimits(memory=32 * 1024)).begin(upload.head)  # no directory
    assert not isinstance(too_big, Refusal)
    with pytest.raises(RequestRefused) as refused:
        list(too_big.feed(upload.body))
    assert refused.value.refusal.reason is Reason.TOO_LARGE


@pytest.mark.parametrize("trailer", [False, True])
def test_a_large_streaming_upload_is_never_held_whole_in_memory(trailer: bool) -> None:
    data = os.urandom(24 * 1024 * 1024)
    upload = signed_upload(data, keys=PLACEHOLDER, trailer=trailer)
    passage = Verifier(PLACEHOLDER, REAL).begin(upload.head)
    assert not isinstance(passage, Refusal)
    digest = hashlib.sha256()
    tracemalloc.start()
    try:
        with passage:
            for start in range(0, len(upload.body), 65536):
                for part in passage.feed(upload.body[start : start + 65536]):
                    digest.update(part)
            for part in passage.end().pieces:
                digest.update(part)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * 1024 * 1024, peak  # a chunk or two, not 24 MiB


def test_botocore_s_default_upload_streams_through_in_bounded_memory() -> None:
    from tests.fixtures.sigv4 import capture, client

    data = os.urandom(24 * 1024 * 1024)
    upload = capture(client("s3", PLACEHOLDER), lambda s3: s3.put_object(Bucket="bucket", Key="big", Body=data))
    assert header(upload.head, b"x-amz-content-sha256") == b"STREAMING-UNSIGNED-PAYLOAD-TRAILER"
    passage = Verifier(PLACEHOLDER, REAL).begin(upload.head)
    assert not isinstance(passage, Refusal)
    sent = 0
    tracemalloc.start()
    try:
        with passage:
            for start in range(0, len(upload.body), 65536):
                sent += sum(len(part) for part in passage.feed(upload.body[start : start + 65536]))
            sent += sum(len(part) for part in passage.end().pieces)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sent == len(upload.body)
    assert peak < 1024 * 1024, peak
