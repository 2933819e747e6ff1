"""Server level: boto3 signing with placeholder keys, re-signed by the verifier, against a moto that checks SigV4.

The moto here has IAM authentication on (devstack/aws_iam.py): it refuses a
request whose signature does not check under a key it issued, so a request
that succeeds upstream was re-signed correctly with the session's real keys.
The controls show moto really checks: the request as the client sent it
(placeholder-signed) is refused, and so is a re-signed request with one
signature digit or one body byte changed. moto does not verify aws-chunked
chunk signatures (the chain is checked against AWS's published values), and
serves presigned URLs under IAM authentication only through
``devstack.aws`` (its presigned-URL section); the presigned URL is also checked against botocore's
own presigner below.
"""

from __future__ import annotations

import os
import socket
import ssl
from datetime import UTC, datetime
from typing import Any
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import boto3
import h11
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from broker.egress.injectors.sigv4 import AwsKeys, Head, Reason, Refusal, RequestRefused, Verifier
from tests.fixtures.aws_iam import BUCKET, AwsSession, IamStack
from tests.fixtures.sigv4 import Captured, forward, header, replace_header, through
from tests.fixtures.sigv4_chunks import signed_upload
from tests.fixtures.sigv4_front import ResigningFront

pytestmark = pytest.mark.server


def aws(service: str, keys: AwsKeys, front: ResigningFront | str, ca: str, **config: Any) -> Any:
    token = keys.session_token.reveal() if keys.session_token is not None else None
    return boto3.client(
        service,
        region_name="us-east-1",
        endpoint_url=front if isinstance(front, str) else front.url,
        verify=ca,
        aws_access_key_id=keys.access_key_id,
        aws_secret_access_key=keys.secret_access_key.reveal(),
        aws_session_token=token,
        config=Config(retries={"max_attempts": 1}, **config),
    )


def test_moto_really_checks_signatures(iam_moto: IamStack, aws_session: AwsSession) -> None:
    ca = str(iam_moto.ca.cert_file)
    assert aws("sts", aws_session.real, iam_moto.url, ca).get_caller_identity()["Arn"].endswith("/agent-s3/agent")
    forged = AwsKeys(
        aws_session.real.access_key_id, aws_session.placeholder.secret_access_key, aws_session.real.session_token
    )
    with pytest.raises(ClientError) as refused:
        aws("sts", forged, iam_moto.url, ca).get_caller_identity()
    assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    with pytest.raises(ClientError) as refused:
        aws("s3", forged, iam_moto.url, ca).list_objects_v2(Bucket=BUCKET)
    assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"


def test_sts_get_caller_identity_through_the_verifier(
    iam_moto: IamStack, aws_session: AwsSession, resigning_front: ResigningFront
) -> None:
    ca = str(iam_moto.ca.cert_file)
    identity = aws("sts", aws_session.placeholder, resigning_front, ca).get_caller_identity()
    assert identity["Arn"] == "arn:aws:sts::123456789012:assumed-role/agent-s3/agent"
    sent = resigning_front.received[-1]
    assert aws_session.placeholder.access_key_id.encode() in (header(sent.head, b"authorization") or b"")
    # control: the request as the client sent it, placeholder-signed, is refused by moto
    assert resigning_front.send(sent.head, sent.body).status == 403
    # control: re-signed, then one body byte changed: moto refuses it (it checks the body's hash)
    head, body = forward(Verifier(aws_session.placeholder, aws_session.real), sent)
    assert resigning_front.send(head, body).status == 200
    answer = resigning_front.send(head, body.replace(b"2011-06-15", b"2011-06-16"))
    assert answer.status == 403 and b"SignatureDoesNotMatch" in answer.body
    # tampered on the way in: the verifier refuses once the body (which the signature covers) is in
    tampered = replace_header(sent.head, b"authorization", flip_last(header(sent.head, b"authorization") or b""))
    passage = Verifier(aws_session.placeholder, aws_session.real).begin(tampered)
    assert not isinstance(passage, Refusal) and passage.head is None  # nothing to send before the body checks
    with pytest.raises(RequestRefused) as refused:
        through(passage, sent.body)
    assert refused.value.refusal.reason is Reason.SIGNATURE


def flip_last(value: bytes) -> bytes:
    return value[:-1] + (b"1" if value.endswith(b"0") else b"0")


def test_a_tampered_request_through_the_front_is_answered_with_an_error_boto3_prints(
    iam_moto: IamStack, aws_session: AwsSession, resigning_front: ResigningFront
) -> None:
    impostor = AwsKeys(
        aws_session.placeholder.access_key_id, aws_session.real.secret_access_key, aws_session.placeholder.session_token
    )
    with pytest.raises(ClientError) as refused:
        aws("s3", impostor, resigning_front, str(iam_moto.ca.cert_file)).list_objects_v2(Bucket=BUCKET)
    assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert "broker egress proxy" in str(refused.value)
    assert [r.reason for r in resigning_front.refusals] == [Reason.SIGNATURE]


def test_s3_objects_through_the_verifier_with_botocore_defaults(
    iam_moto: IamStack, aws_session: AwsSession, resigning_front: ResigningFront
) -> None:
    s3 = aws("s3", aws_session.placeholder, resigning_front, str(iam_moto.ca.cert_file))
    data = os.urandom(3 * 1024 * 1024 + 17)
    s3.put_object(Bucket=BUCKET, Key="dir/a b+c.bin", Body=data)
    put = resigning_front.received[-1]
    assert header(put.head, b"x-amz-content-sha256") == b"STREAMING-UNSIGNED-PAYLOAD-TRAILER"
    assert header(put.head, b"content-encoding") == b"aws-chunked"
    assert s3.get_object(Bucket=BUCKET, Key="dir/a b+c.bin")["Body"].read() == data
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="dir/")
    assert [o["Key"] for o in listed["Contents"]] == ["dir/a b+c.bin"]
    # control: the upload as the client sent it is refused by moto; re-signed with a digit changed, too
    assert resigning_front.send(put.head, put.body).status == 403
    head, body = forward(Verifier(aws_session.placeholder, aws_session.real), put)
    answer = resigning_front.send(
        replace_header(head, b"authorization", flip_last(header(head, b"authorization") or b"")), body
    )
    assert answer.status == 403 and b"SignatureDoesNotMatch" in answer.body


def test_a_multipart_upload_through_the_verifier(
    iam_moto: IamStack, aws_session: AwsSession, resigning_front: ResigningFront
) -> None:
    s3 = aws("s3", aws_session.placeholder, resigning_front, str(iam_moto.ca.cert_file))
    parts = [os.urandom(5 * 1024 * 1024), os.urandom(1000)]
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key="multi")["UploadId"]
    etags = [
        s3.upload_part(Bucket=BUCKET, Key="multi", UploadId=upload, PartNumber=n, Body=part)["ETag"]
        for n, part in enumerate(parts, start=1)
    ]
    s3.complete_multipart_upload(
        Bucket=BUCKET,
        Key="multi",
        UploadId=upload,
        MultipartUpload={"Parts": [{"ETag": e, "PartNumber": n} for n, e in enumerate(etags, start=1)]},
    )
    assert s3.get_object(Bucket=BUCKET, Key="multi")["Body"].read() == b"".join(parts)


def test_a_signed_body_hash_upload_through_the_verifier(
    iam_moto: IamStack, aws_session: AwsSession, resigning_front: ResigningFront
) -> None:
    s3 = aws(
        "s3",
        aws_session.placeholder,
        resigning_front,
        str(iam_moto.ca.cert_file),
        request_checksum_calculation="when_required",
    )
    s3.put_object(Bucket=BUCKET, Key="hashed", Body=b"covered by its hash")
    assert len(header(resigning_front.received[-1].head, b"x-amz-content-sha256") or b"") == 64
    assert s3.get_object(Bucket=BUCKET, Key="hashed")["Body"].read() == b"covered by its hash"


def test_a_signed_streaming_upload_through_the_verifier(
    iam_moto: IamStack, aws_session: AwsSession, resigning_front: ResigningFront
) -> None:
    data = os.urandom(200_000)
    upload = signed_upload(
        data, f"/{BUCKET}/streamed", f"127.0.0.1:{resigning_front.port}", keys=aws_session.placeholder
    )
    assert request(resigning_front, upload, str(iam_moto.ca.cert_file)) == 200
    s3 = aws("s3", aws_session.placeholder, resigning_front, str(iam_moto.ca.cert_file))
    assert s3.get_object(Bucket=BUCKET, Key="streamed")["Body"].read() == data
    body = bytearray(upload.body)
    body[100_000] ^= 1
    assert request(resigning_front, Captured(upload.head, bytes(body)), str(iam_moto.ca.cert_file)) == 403
    assert resigning_front.refusals[-1].reason is Reason.CHUNK


def request(front: ResigningFront, captured: Captured, ca: str) -> int:
    """``captured`` sent to the front over TLS as it is; the answer's status."""
    context = ssl.create_default_context(cafile=ca)
    with (
        socket.create_connection(("127.0.0.1", front.port), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
    ):
        conn = h11.Connection(h11.CLIENT)
        sock.sendall(
            conn.send(
                h11.Request(
                    method=captured.head.method, target=captured.head.target, headers=list(captured.head.headers)
                )
            )
            or b""
        )
        sock.sendall(conn.send(h11.Data(data=captured.body)) or b"")
        sock.sendall(conn.send(h11.EndOfMessage()) or b"")
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(sock.recv(65536))
            elif isinstance(event, h11.Response):
                return int(event.status_code)


def test_a_presigned_url_is_presigned_again_exactly_as_botocore_presigns_it_with_the_real_keys(
    iam_moto: IamStack, aws_session: AwsSession
) -> None:
    ca = str(iam_moto.ca.cert_file)
    when = datetime.now(UTC).replace(tzinfo=None, microsecond=0)  # botocore's clock: naive UTC
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        mine = aws("s3", aws_session.placeholder, iam_moto.url, ca, signature_version="s3v4")
        url = mine.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": "a b"}, ExpiresIn=900)
        theirs = aws("s3", aws_session.real, iam_moto.url, ca, signature_version="s3v4")
        expected = theirs.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": "a b"}, ExpiresIn=900)
    parts = urlsplit(url)
    head = Head(b"GET", f"{parts.path}?{parts.query}".encode(), ((b"host", parts.netloc.encode()),))
    out, _ = forward(Verifier(aws_session.placeholder, aws_session.real), Captured(head, b""))
    ours = parse_qs(urlsplit(out.target.decode()).query)
    assert ours == parse_qs(urlsplit(expected).query)
    assert out.target.decode().split("?")[0] == urlsplit(expected).path
