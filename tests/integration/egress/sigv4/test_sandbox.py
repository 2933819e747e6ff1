"""AWS with ``inject: proxy`` from inside ``broker exec --network allowlist``: placeholder keys in the sandbox, the
proxy verifies each request's SigV4 signature with them and re-signs it with the session's real STS keys.

Upstream is moto with IAM authentication on (``devstack/aws_iam.py``): it checks every signature under a key it
issued, so a request that succeeds was re-signed with the real keys. It sits behind a TLS front on
``127.0.0.1`` (an IP literal: no multi-label name resolves to loopback here), the provider's ``proxy_hosts`` and
``upstream_ca_file``; the broker's own identity is moto's IAM user. The sandbox has its own network namespace,
so its only way to AWS is the session's proxy (``tests.fixtures.aws_proxied``).
"""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

from devstack.aws import REGION
from devstack.aws_iam import BUCKET
from tests.fixtures.aws_proxied import AwsProxied, lines_json, py, refusals_of, requests_of
from tests.fixtures.sandbox import sandbox_unavailable

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]


SDK = py(
    f"""
import configparser, hashlib, json, os
import boto3, botocore

cfg = configparser.ConfigParser()
cfg.read(os.environ["AWS_SHARED_CREDENTIALS_FILE"])
held = cfg["default"]
print(json.dumps({{"key_id": held["aws_access_key_id"], "secret": held["aws_secret_access_key"],
                  "token": held["aws_session_token"], "config": open(os.environ["AWS_CONFIG_FILE"]).read(),
                  "botocore": botocore.__version__}}))
sts, s3 = boto3.client("sts"), boto3.client("s3")
payloads = []
s3.meta.events.register("before-send.s3.PutObject",
                        lambda request, **_: payloads.append(request.headers["x-amz-content-sha256"].decode()))
print(json.dumps({{"arn": sts.get_caller_identity()["Arn"]}}))
body = os.urandom(300_000)
s3.put_object(Bucket="{BUCKET}", Key="proxied/one", Body=body)
print(json.dumps({{"payloads": payloads,
                  "get": s3.get_object(Bucket="{BUCKET}", Key="proxied/one")["Body"].read() == body}}))
part = os.urandom(5 * 1024 * 1024)
upload = s3.create_multipart_upload(Bucket="{BUCKET}", Key="proxied/multi")["UploadId"]
etags = [s3.upload_part(Bucket="{BUCKET}", Key="proxied/multi", UploadId=upload, PartNumber=n, Body=b)["ETag"]
         for n, b in ((1, part), (2, b"tail"))]
s3.complete_multipart_upload(Bucket="{BUCKET}", Key="proxied/multi", UploadId=upload,
    MultipartUpload={{"Parts": [{{"ETag": e, "PartNumber": n}} for n, e in enumerate(etags, 1)]}})
whole = s3.get_object(Bucket="{BUCKET}", Key="proxied/multi")["Body"].read()
listed = [o["Key"] for o in s3.list_objects_v2(Bucket="{BUCKET}", Prefix="proxied/")["Contents"]]
print(json.dumps({{"multi": whole == part + b"tail", "listed": listed,
                  "url": s3.generate_presigned_url("get_object", Params={{"Bucket": "{BUCKET}", "Key": "proxied/one"}}),
                  "sha": hashlib.sha256(body).hexdigest()}}))
"""
)


def test_boto3_works_unchanged_with_placeholder_keys_and_the_real_ones_never_enter_the_sandbox(
    aws_proxied: AwsProxied,
) -> None:
    env = aws_proxied.env
    result = aws_proxied.exec(aws_proxied.task(), SDK)
    assert result.code == 0, result.stdout + result.stderr
    seen = lines_json(result)
    assert seen["arn"].endswith(":assumed-role/agent-s3/" + seen["arn"].rsplit("/", 1)[1])
    assert seen["payloads"] == ["STREAMING-UNSIGNED-PAYLOAD-TRAILER"]  # botocore's aws-chunked default
    assert seen["get"] and seen["multi"]
    assert seen["listed"] == ["proxied/multi", "proxied/one"]
    # Placeholders of the real shapes; the real key id (the issued record's) is not the sandbox's.
    issued = next(r for r in env.log_records() if r["event"] == "credential.issued")
    real_key_id = issued["reference"]["access_key_id"]
    assert seen["key_id"].startswith("ASIA") and len(seen["key_id"]) == 20 and seen["key_id"] != real_key_id
    assert len(seen["secret"]) == 40
    assert real_key_id not in result.stdout + result.stderr
    assert "signature_version = s3v4" in seen["config"]
    assert f"endpoint_url = https://127.0.0.1:{aws_proxied.port}" in seen["config"]
    # The placeholders are worthless at AWS itself.
    direct = boto3.client(
        "sts",
        region_name=REGION,
        endpoint_url=aws_proxied.stack.moto.url,
        aws_access_key_id=seen["key_id"],
        aws_secret_access_key=seen["secret"],
        aws_session_token=seen["token"],
    )
    with pytest.raises(ClientError) as refused:
        direct.get_caller_identity()
    assert refused.value.response["Error"]["Code"] == "InvalidClientTokenId"
    # Every request went through the proxy, re-signed with the store credential's keys, and AWS took it.
    records = requests_of(env)
    assert len(records) == 9  # sts, put, get, the multipart upload (4), get, list
    assert all(r["credential"] == "store" and r["decision"] == "allowed" for r in records), records
    assert {r["upstream_status"] for r in records} == {200}
    assert refusals_of(env) == []
