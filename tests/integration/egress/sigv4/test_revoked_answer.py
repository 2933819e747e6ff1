"""After a revocation, an AWS SDK still talking to the session's proxy reads an AWS error that names it.

The session's proxy for real (``proxy_thread`` on loopback TCP, the AWS credential's ``Resigner`` holding a
session's keys from moto's AssumeRole), moto with IAM authentication on behind TLS, and boto3 with the
placeholder keys and the proxy as its HTTPS proxy, as in the sandbox. The revocation is what an outside
``broker revoke`` does to a running exec's proxy (``Halt``: the secrets dropped, every connection cut, every
request refused from then on); each S3 and STS call after it is a ``ClientError`` with ``AccessDenied`` and a
message naming the revocation, in the XML each service's SDK parses (S3's ``<Error>``, STS's
``<ErrorResponse>``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from broker.core.running.halting import Halt
from broker.egress.destinations import parse_destination
from broker.egress.injectors.sigv4.resigner import Resigner
from broker.egress.proxy.thread import ProxyThread, proxy_thread
from broker.egress.terminate.ca import SessionCA, ca_bundle
from broker.egress.terminate.interceptor import Interceptor
from devstack.aws import REGION
from tests.fixtures.aws_iam import BUCKET, AwsSession, IamStack

pytestmark = pytest.mark.server


@pytest.fixture
def proxied(iam_moto: IamStack, aws_session: AwsSession, tmp_path: Path) -> Iterator[tuple[ProxyThread, Halt, Path]]:
    port = iam_moto.front.port
    interceptor = Interceptor(lambda hosts: SessionCA(hosts, datetime.now(UTC) + timedelta(minutes=20)))
    hosts = frozenset({("127.0.0.1", port)})
    resigner = Resigner(
        "store", hosts, aws_session.placeholder, aws_session.real, upstream_ca_file=iam_moto.ca.cert_file
    )
    interceptor.add_injector(resigner)
    bundle = tmp_path / "ca-bundle.pem"
    bundle.write_bytes(ca_bundle(interceptor.ca.pem, b""))
    with proxy_thread(
        (parse_destination(f"127.0.0.1:{port}"),), unix=False, tcp=True, interceptor=interceptor
    ) as proxy:
        halt = Halt(grace=0.1)
        halt.attach_proxy(proxy, interceptor)
        yield proxy, halt, bundle


def client(service: str, session: AwsSession, proxy: ProxyThread, bundle: Path, port: int) -> Any:
    keys = session.placeholder
    assert keys.session_token is not None
    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=f"https://127.0.0.1:{port}",
        verify=str(bundle),
        aws_access_key_id=keys.access_key_id,
        aws_secret_access_key=keys.secret_access_key.reveal(),
        aws_session_token=keys.session_token.reveal(),
        config=Config(
            retries={"max_attempts": 1},
            proxies={"https": f"http://127.0.0.1:{proxy.port}"},
            s3={"addressing_style": "path"},
        ),
    )


def test_after_revoke_s3_and_sts_calls_raise_access_denied_naming_the_revocation(
    iam_moto: IamStack, aws_session: AwsSession, proxied: tuple[ProxyThread, Halt, Path]
) -> None:
    proxy, halt, bundle = proxied
    port = iam_moto.front.port
    sts, s3 = (client(service, aws_session, proxy, bundle, port) for service in ("sts", "s3"))
    assert sts.get_caller_identity()["Arn"].endswith("/agent-s3/agent")  # re-signed: moto takes it
    assert s3.list_objects_v2(Bucket=BUCKET)["ResponseMetadata"]["HTTPStatusCode"] == 200
    halt()  # what an outside revoke does to the running exec's proxy

    calls = {"sts": sts.get_caller_identity, "s3": lambda: s3.list_objects_v2(Bucket=BUCKET)}
    for service, call in calls.items():
        for _ in range(2):  # a new connection after the cut, then again
            with pytest.raises(ClientError) as refused:
                call()
            response = refused.value.response
            assert response["ResponseMetadata"]["HTTPStatusCode"] == 403
            assert response["Error"]["Code"] == "AccessDenied", response
            assert "this session has been revoked" in response["Error"]["Message"], response
            # STS's query-protocol <ErrorResponse> carries a Type; S3's <Error> does not
            assert ("Type" in response["Error"]) == (service == "sts"), response
            assert "(AccessDenied)" in str(refused.value) and "revoked" in str(refused.value)  # what the SDK prints
