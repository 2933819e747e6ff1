"""AWS with ``inject: proxy`` from inside ``broker exec --network allowlist``: placeholder keys in the sandbox, the
proxy verifies each request's SigV4 signature with them and re-signs it with the session's real STS keys.

Upstream is moto with IAM authentication on (``devstack/aws_iam.py``): it checks every signature under a key it
issued, so a request that succeeds was re-signed with the real keys. It sits behind a TLS front on
``127.0.0.1`` (an IP literal: no multi-label name resolves to loopback here), the provider's ``proxy_hosts`` and
``upstream_ca_file``; the broker's own identity is moto's IAM user. The sandbox has its own network namespace,
so its only way to AWS is the session's proxy. The scripts inside clear ``NO_PROXY`` (the hints exempt
127.0.0.1, which real AWS hosts are not) and use boto3 and the AWS CLI from the test's virtualenv as they are.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devstack.aws import REGION
from devstack.aws_iam import BUCKET, ROLE_ARN
from tests.fixtures.aws_iam import IamStack
from tests.fixtures.brokerenv import BrokerEnv, Result, make_env
from tests.fixtures.sandbox import python_runtime, sandbox_unavailable

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

VENV = Path(sys.prefix)
PYTHON = VENV / "bin" / "python"


@dataclass
class AwsProxied:
    env: BrokerEnv
    port: int
    stack: IamStack

    def task(self, *, inject: str = "proxy", name: str = "task.yaml") -> Path:
        return self.env.write_task(
            f"""
version: 1
task: fix-aws-1
ttl: 30m
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
network:
  allow: ["127.0.0.1:{self.port}"]
credentials:
  - name: store
    provider: aws
    role_arn: {ROLE_ARN}
    ttl: 15m
    inject: {inject}
""",
            name,
        )

    def process_env(self) -> dict[str, str]:
        """The broker's own identity (moto's IAM user) for its AssumeRole; nothing from ~/.aws."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "AWS_ACCESS_KEY_ID": self.stack.moto.broker_key_id,
            "AWS_SECRET_ACCESS_KEY": self.stack.moto.broker_secret,
            "AWS_CONFIG_FILE": str(self.env.root / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(self.env.root / "no-aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def exec(self, task: Path, script: str, *extra: str) -> Result:
        """``script`` (sh) in the bwrap sandbox with the venv bound read-only, through the session's proxy."""
        _, prefix = python_runtime()
        binds = ["--ro-bind", prefix, "--ro-bind", str(VENV)]
        argv = ["exec", "--task", str(task), "--sandbox", "bwrap", "--network", "allowlist", *binds, *extra]
        inside = "export NO_PROXY= no_proxy= HOME=/tmp AWS_MAX_ATTEMPTS=1\n" + script
        return self.env.run_process(*argv, "--", "sh", "-c", inside, env=self.process_env(), timeout=240)


@pytest.fixture
def aws_proxied(tmp_path: Path, iam_moto: IamStack) -> Iterator[AwsProxied]:
    env = make_env(tmp_path)
    env.add_provider(
        "aws",
        {
            "type": "aws_sts",
            "region": REGION,
            "endpoint_url": iam_moto.moto.url,
            "revoke": "expire",
            "proxy_hosts": [f"127.0.0.1:{iam_moto.front.port}"],
            "upstream_ca_file": str(iam_moto.ca.cert_file),
        },
    )
    env.write_policy(
        f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["127.0.0.1:{iam_moto.front.port}"]
    grants:
      - provider: aws
        roles: ["{ROLE_ARN}"]
        actions: ["*"]
        max_ttl: 15m
"""
    )
    try:
        yield AwsProxied(env, iam_moto.front.port, iam_moto)
    finally:
        env.cleanup()


def py(program: str) -> str:
    """A shell line running ``program`` with the venv's python (boto3 as installed, the hints alone)."""
    return f"{PYTHON} - <<'PY'\n{program}\nPY\n"


def lines_json(result: Result) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            values.update(json.loads(line))
    return values


def requests_of(env: BrokerEnv) -> list[dict[str, Any]]:
    return [r for r in env.log_records() if r["event"] == "egress.request"]


def refusals_of(env: BrokerEnv) -> list[dict[str, Any]]:
    return [r for r in env.log_records() if r["event"] == "egress.refused"]


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
