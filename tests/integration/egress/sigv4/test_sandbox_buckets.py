"""Virtual-hosted S3 from inside ``broker exec --network allowlist``: a bucket the session policy names, whose host
``network`` allows, is terminated and re-signed at ``BUCKET.s3.REGION.amazonaws.com``; any other bucket's is not.

The upstream is moto with IAM authentication on (it checks every signature, so a request that succeeds was
re-signed with the session's real keys, over the bucket host the client signed for) behind a TLS front whose
certificate names ``s3.REGION.amazonaws.com`` and ``*.s3.REGION.amazonaws.com``. AWS's real names resolve to
loopback only for the broker, in a mount namespace of its own whose ``/etc/hosts`` names them
(``named_loopback``); the sandbox resolves nothing, its client asks the proxy to CONNECT by name. The sandbox's
boto3 asks for virtual-hosted addressing itself (the session's config keeps path-style as its default).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devstack.aws import REGION
from devstack.aws_iam import BUCKET, ROLE_ARN
from tests.fixtures.aws_iam import IamStack
from tests.fixtures.aws_proxied import VENV, AwsProxied, lines_json, py, requests_of
from tests.fixtures.brokerenv import Result, make_env
from tests.fixtures.net import named_loopback
from tests.fixtures.sandbox import sandbox_unavailable
from tests.fixtures.tls import TLSFront, make_test_ca

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

S3 = f"s3.{REGION}.amazonaws.com"
OTHER = "other-bucket"  # a bucket the session policy does not name


@dataclass
class NamedAws:
    proxied: AwsProxied
    hosts: Path  # the broker's /etc/hosts: AWS's names on loopback

    @property
    def port(self) -> int:
        return self.proxied.port

    def task(self) -> Path:
        p = self.port
        return self.proxied.env.write_task(
            f"""
version: 1
task: fix-aws-1
ttl: 30m
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
network:
  allow: ["{S3}:{p}", "{BUCKET}.{S3}:{p}", "127.0.0.1:{p}"]
credentials:
  - name: store
    provider: aws
    role_arn: {ROLE_ARN}
    ttl: 15m
    inject: proxy
    session_policy:
      Version: "2012-10-17"
      Statement:
        - Effect: Allow
          Action: ["s3:*"]
          Resource: ["arn:aws:s3:::{BUCKET}", "arn:aws:s3:::{BUCKET}/*", "arn:aws:s3:::logs-*/*"]
""",
            "task.yaml",
        )

    def exec(self, script: str) -> Result:
        argv = [sys.executable, "-m", "broker.cli", "--config", str(self.proxied.env.config_path)]
        argv += self.proxied.argv(self.task(), script)
        env = self.proxied.process_env()
        done = subprocess.run(
            [*named_loopback(self.hosts), *argv], env=env, capture_output=True, text=True, timeout=240, check=False
        )
        return Result(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def named_aws(tmp_path: Path, iam_moto: IamStack) -> Iterator[NamedAws]:
    (tmp_path / "ca").mkdir()
    ca = make_test_ca(tmp_path / "ca", [S3, f"*.{S3}"])
    front = TLSFront(ca.context, iam_moto.moto.port)
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"127.0.0.1 {name}\n" for name in ("localhost", S3, f"{BUCKET}.{S3}", f"{OTHER}.{S3}")))
    hosts.chmod(0o644)
    env = make_env(tmp_path)
    env.add_provider(
        "aws",
        {
            "type": "aws_sts",
            "region": REGION,
            "endpoint_url": iam_moto.moto.url,
            "revoke": "expire",
            "proxy_hosts": [f"{S3}:{front.port}"],
            "upstream_ca_file": str(ca.cert_file),
        },
    )
    env.write_policy(
        f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["{S3}:{front.port}", "*.{S3}:{front.port}", "127.0.0.1:{front.port}"]
    grants:
      - provider: aws
        roles: ["{ROLE_ARN}"]
        actions: ["*"]
        max_ttl: 15m
"""
    )
    try:
        yield NamedAws(AwsProxied(env, front.port, iam_moto, VENV), hosts)
    finally:
        front.close()
        env.cleanup()


VIRTUAL = py(
    f"""
import json, os
from urllib.parse import urlsplit
import boto3
from botocore.config import Config

hosts = []
def seen(request, **_):
    hosts.append(urlsplit(request.url).hostname)
virtual = boto3.client("s3", config=Config(s3={{"addressing_style": "virtual"}}))
virtual.meta.events.register("before-send.s3", seen)
body = os.urandom(200_000)
virtual.put_object(Bucket="{BUCKET}", Key="virtual/one", Body=body)
got = virtual.get_object(Bucket="{BUCKET}", Key="virtual/one")["Body"].read() == body
listed = [o["Key"] for o in virtual.list_objects_v2(Bucket="{BUCKET}", Prefix="virtual/")["Contents"]]
default = boto3.client("s3")  # the session's config: path-style
default.meta.events.register("before-send.s3", seen)
path_listed = [o["Key"] for o in default.list_objects_v2(Bucket="{BUCKET}", Prefix="virtual/")["Contents"]]
print(json.dumps({{"got": got, "listed": listed, "path_listed": path_listed}}))
try:
    virtual.list_objects_v2(Bucket="{OTHER}")
    other = "listed"
except Exception as error:
    other = type(error).__name__ + ": " + str(error)
print(json.dumps({{"other": other, "hosts": hosts}}))
"""
)


def test_a_bucket_the_session_policy_names_is_re_signed_at_its_virtual_hosted_name(named_aws: NamedAws) -> None:
    result = named_aws.exec(VIRTUAL)
    assert result.code == 0, result.stdout + result.stderr
    seen = lines_json(result)
    assert seen["got"] and seen["listed"] == ["virtual/one"] and seen["path_listed"] == ["virtual/one"], seen
    bucket_host = f"{BUCKET}.{S3}"
    assert seen["hosts"][:3] == [bucket_host] * 3 and seen["hosts"][3] == S3, seen["hosts"]
    # Another bucket's host is not terminated: not among the session's hosts, the allow-list refuses it.
    assert seen["other"].startswith("ProxyConnectionError"), seen["other"]
    env, port = named_aws.proxied.env, named_aws.port
    records = requests_of(env)
    at_bucket = [r for r in records if r["host"] == f"{bucket_host}:{port}"]
    assert [r["method"] for r in at_bucket] == ["PUT", "GET", "GET"], records
    assert all(r["credential"] == "store" and r["upstream_status"] == 200 for r in at_bucket), at_bucket
    assert [r["host"] for r in records if r not in at_bucket] == [f"{S3}:{port}"]
    denied = [r["destination"] for r in env.log_records() if r["event"] == "egress.denied"]
    assert denied == [f"{OTHER}.{S3}:{port}"]
