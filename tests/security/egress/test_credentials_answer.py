"""An answer from an AWS host holding credentials the session does not own never reaches the sandbox.

The re-signer refuses the actions it knows to mint (``test_sts_escape``); this is the lock behind it: whatever an
AWS host answers, once the masker has turned the session's own keys into their placeholders, an answer still
holding an AWS access key id (or a secret key or session token field) is someone else's credentials, and the
proxy refuses it with 502 instead of relaying it. An STS answer is held whole, so its refusal is a clean answer;
an S3 answer is held for its first bytes and then streamed, and a key id found later cuts it off.

The session's proxy for real (``proxy_thread``, an AWS credential's ``Resigner``) and boto3 with the placeholder
keys through it; the upstream is a recording stand-in that answers what the test sets (``RecordingAPI.canned``),
as an AWS host handing out credentials would.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, IncompleteReadError, ResponseStreamingError

from broker.egress.destinations import parse_destination
from broker.egress.exchange.refusals import Refusal, RefusedRequest
from broker.egress.injectors.sigv4 import AwsKeys
from broker.egress.injectors.sigv4.resigner import Resigner
from broker.egress.proxy.thread import ProxyThread, proxy_thread
from broker.egress.terminate.ca import SessionCA, ca_bundle
from broker.egress.terminate.interceptor import Interceptor
from providers.aws.files import placeholder_keys
from tests.fixtures.recording_api import RecordingAPI
from tests.fixtures.sigv4 import make_keys
from tests.fixtures.tls import make_test_ca

FOREIGN = "ASIAQWERTYUIOPASDFGH"  # another session's key id, as an AssumeRole answer would carry it
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzzzzzzzzz"
XML = "text/xml"


def caller_identity(extra: str) -> bytes:
    return (
        '<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><GetCallerIdentityResult>'
        "<Arn>arn:aws:sts::123456789012:assumed-role/agent-s3/s</Arn><UserId>AROAEXAMPLEROLEID:s</UserId>"
        f"<Account>123456789012</Account>{extra}</GetCallerIdentityResult>"
        "<ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></GetCallerIdentityResponse>"
    ).encode()


@dataclass
class Stage:
    proxy: ProxyThread
    api: RecordingAPI
    real: AwsKeys
    placeholder: AwsKeys
    bundle: Path

    def client(self, service: str) -> Any:
        keys = self.placeholder
        assert keys.session_token is not None and self.proxy.port is not None
        return boto3.client(
            service,
            region_name="us-east-1",
            endpoint_url=f"https://127.0.0.1:{self.api.port}",
            verify=str(self.bundle),
            aws_access_key_id=keys.access_key_id,
            aws_secret_access_key=keys.secret_access_key.reveal(),
            aws_session_token=keys.session_token.reveal(),
            config=Config(
                retries={"total_max_attempts": 1},  # one try: botocore retries a 502
                proxies={"https": f"http://127.0.0.1:{self.proxy.port}"},
                s3={"addressing_style": "path"},
            ),
        )


@pytest.fixture
def stage(tmp_path: Path) -> Iterator[Stage]:
    test_ca = make_test_ca(tmp_path, ["localhost"])
    api = RecordingAPI(test_ca.context)
    real = make_keys()
    placeholder = placeholder_keys(real)
    interceptor = Interceptor(lambda hosts: SessionCA(hosts, datetime.now(UTC) + timedelta(minutes=20)))
    hosts = frozenset({("127.0.0.1", api.port)})
    interceptor.add_injector(Resigner("store", hosts, placeholder, real, upstream_ca_file=test_ca.cert_file))
    bundle = tmp_path / "ca-bundle.pem"
    bundle.write_bytes(ca_bundle(interceptor.ca.pem, b""))
    try:
        destination = parse_destination(f"127.0.0.1:{api.port}")
        with proxy_thread((destination,), unix=False, tcp=True, interceptor=interceptor) as proxy:
            yield Stage(proxy, api, real, placeholder, bundle)
    finally:
        api.close()


def test_an_sts_answer_with_another_sessions_keys_is_refused_with_502(stage: Stage) -> None:
    credentials = f"<Credentials><AccessKeyId>{FOREIGN}</AccessKeyId><SecretAccessKey>{SECRET}</SecretAccessKey>"
    stage.api.canned["/"] = (200, XML, caller_identity(credentials + "</Credentials>"))
    with pytest.raises(ClientError) as refused:
        stage.client("sts").get_caller_identity()
    error = refused.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 502
    assert error["Error"]["Code"] == "AccessDenied"
    assert "credentials the session does not own" in error["Error"]["Message"]
    assert FOREIGN not in str(refused.value) and SECRET not in str(refused.value)
    assert [method for method, _ in stage.api.requests()] == ["POST"]  # it went upstream; the answer did not come back
    refusal = RefusedRequest(f"127.0.0.1:{stage.api.port}", Refusal.UNKNOWN_KEY)
    assert stage.proxy.denials() == {refusal: 1}  # the session's egress.refused record: reason unknown-key


def test_a_secret_field_alone_is_refused_and_the_sessions_own_key_id_passes_as_its_placeholder(stage: Stage) -> None:
    stage.api.canned["/"] = (200, XML, caller_identity(f"<SessionToken>{'t' * 300}</SessionToken>"))
    with pytest.raises(ClientError) as refused:
        stage.client("sts").get_caller_identity()
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 502
    # control: the session's own real key id in an answer (an error echoes it) comes back as the placeholder
    stage.api.canned["/"] = (200, XML, caller_identity(f"<Note>{stage.real.access_key_id}</Note>"))
    identity = stage.client("sts").get_caller_identity()
    assert identity["Account"] == "123456789012"


def test_an_s3_answer_is_refused_whole_when_short_and_cut_off_when_the_key_comes_late(stage: Stage) -> None:
    stage.api.canned["/agent-bucket"] = (
        200,
        "application/xml",
        f"<CreateSessionResult><Credentials><AccessKeyId>{FOREIGN}</AccessKeyId></Credentials></CreateSessionResult>".encode(),
    )
    with pytest.raises(ClientError) as refused:
        stage.client("s3").list_objects_v2(Bucket="agent-bucket")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 502
    late = b"x" * (1024 * 1024) + f" {FOREIGN} ".encode() + b"y" * 1024
    stage.api.canned["/agent-bucket/late"] = (200, "application/octet-stream", late)
    body = stage.client("s3").get_object(Bucket="agent-bucket", Key="late")["Body"]
    read = bytearray()
    with pytest.raises((IncompleteReadError, ResponseStreamingError)):  # the body ends short of its length
        while piece := body.read(64 * 1024):
            read += piece
    assert FOREIGN.encode() not in read and len(read) < len(late)
    # control: an object without a foreign key id streams through whole
    stage.api.canned["/agent-bucket/plain"] = (
        200,
        "application/octet-stream",
        late.replace(FOREIGN.encode(), b"z" * 20),
    )
    assert stage.client("s3").get_object(Bucket="agent-bucket", Key="plain")["Body"].read() == late.replace(
        FOREIGN.encode(), b"z" * 20
    )
