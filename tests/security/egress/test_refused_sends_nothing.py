"""A request the AWS re-signer refuses sends nothing upstream, not even its head.

A PUT whose ``x-amz-content-sha256`` is the hash of its body is signed over that hash, so the proxy can only
know it is the request the sandbox signed once the whole body matched. The head, re-signed with the real key,
used to go upstream at once (the hash was declared), and only the body waited: a tampered body was refused,
but its head (the real key's signature over another body, the object's name, its metadata) had already
reached the upstream. Now nothing of such a request is written upstream before the body checked.

The session's proxy for real (``proxy_thread``, the credential's ``Resigner`` holding a session's keys from
moto's AssumeRole) in front of a TLS front that records every byte a connection carries (``TLSFront`` with
``record``), then moto with IAM authentication on. The request is what botocore signs with the placeholder
keys; its body is changed after signing, as a sandbox can.
"""

from __future__ import annotations

import hashlib
import http.client
import ssl
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from broker.egress.destinations import parse_destination
from broker.egress.injectors.sigv4.resigner import Resigner
from broker.egress.proxy.thread import ProxyThread, proxy_thread
from broker.egress.terminate.ca import SessionCA, ca_bundle
from broker.egress.terminate.interceptor import Interceptor
from tests.fixtures.aws_iam import BUCKET, AwsSession, IamStack
from tests.fixtures.sigv4 import Captured, capture, client, header
from tests.fixtures.tls import TLSFront

pytestmark = pytest.mark.server
BODY = b"the object the sandbox signed\n" * 2000


@pytest.fixture
def recorded(iam_moto: IamStack, aws_session: AwsSession, tmp_path: Path) -> Iterator[tuple[ProxyThread, TLSFront]]:
    front = TLSFront(iam_moto.ca.context, iam_moto.moto.port, record=True)
    interceptor = Interceptor(lambda hosts: SessionCA(hosts, datetime.now(UTC) + timedelta(minutes=20)))
    resigner = Resigner(
        "store",
        frozenset({("127.0.0.1", front.port)}),
        aws_session.placeholder,
        aws_session.real,
        upstream_ca_file=iam_moto.ca.cert_file,
        spool_dir=tmp_path,
    )
    interceptor.add_injector(resigner)
    (tmp_path / "ca-bundle.pem").write_bytes(ca_bundle(interceptor.ca.pem, b""))
    try:
        destination = parse_destination(f"127.0.0.1:{front.port}")
        with proxy_thread((destination,), unix=False, tcp=True, interceptor=interceptor) as proxy:
            yield proxy, front
    finally:
        front.close()


def signed_put(session: AwsSession, front: TLSFront, key: str) -> Captured:
    """A PutObject botocore signs with the placeholder keys, its body's SHA-256 in x-amz-content-sha256."""
    s3 = client(
        "s3",
        session.placeholder,
        f"https://127.0.0.1:{front.port}",
        s3={"addressing_style": "path", "payload_signing_enabled": True},
        request_checksum_calculation="when_required",
    )
    captured = capture(s3, lambda aws: aws.put_object(Bucket=BUCKET, Key=key, Body=BODY))
    assert header(captured.head, b"x-amz-content-sha256") == hashlib.sha256(BODY).hexdigest().encode()
    return captured


def through_proxy(proxy: ProxyThread, front: TLSFront, bundle: Path, sent: Captured, body: bytes) -> tuple[int, bytes]:
    """``sent``'s head with ``body`` through the proxy's CONNECT tunnel, as written: the answer's status and body."""
    assert proxy.port is not None
    context = ssl.create_default_context(cafile=str(bundle))
    connection = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=context, timeout=30)
    connection.set_tunnel("127.0.0.1", front.port)
    try:
        connection.putrequest(sent.head.method.decode(), sent.head.target.decode(), True, True)
        for name, value in sent.head.headers:
            connection.putheader(name.decode(), value.decode())
        connection.endheaders(body)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def test_a_tampered_signed_body_sends_not_even_the_head_upstream(
    aws_session: AwsSession, recorded: tuple[ProxyThread, TLSFront], tmp_path: Path
) -> None:
    proxy, front = recorded
    bundle = tmp_path / "ca-bundle.pem"
    tampered = BODY.replace(b"signed", b"forged")  # the same length, another hash
    status, answer = through_proxy(proxy, front, bundle, signed_put(aws_session, front, "tampered"), tampered)
    assert status == 403 and b"<Code>XAmzContentSHA256Mismatch</Code>" in answer
    # control: the same request as signed goes through the same path, and the front records it
    status, _ = through_proxy(proxy, front, bundle, signed_put(aws_session, front, "control"), BODY)
    assert status == 200
    deadline = time.monotonic() + 5
    while b"PUT /agent-bucket/control " not in b"".join(front.received) and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = b"".join(front.received)
    assert b"PUT /agent-bucket/control " in seen and BODY in seen
    assert b"tampered" not in seen and b"forged" not in seen, "the refused request's head went upstream"
    assert seen.count(b"PUT ") == 1  # the control, and nothing of the refused request
