"""A moto server that checks SigV4 signatures: IAM authentication on, the broker an IAM user with an access key.

moto verifies each request's signature (and evaluates the caller's IAM
policies by action) once its IAM authentication is on: the count
``INITIAL_NO_AUTH_ACTION_COUNT`` of requests it lets through unchecked is
reached. The server runs in a process of its own (``python -m devstack.aws``,
so this setting stays out of the in-process moto other tests share); the
identities are made while nothing is checked, then moto's own
``/moto-api/reset-auth`` sets the count to 0 and every request from then on
must be signed by a known key. What exists then:

- the broker: IAM user ``broker`` with an access key (``AKIA...``), allowed only what minting needs
  (``BROKER_ACTIONS``; revoke with ``revoke = "expire"``: no deny policy written);
- the role ``agent-s3``, trusting that user, allowed S3 and ``sts:GetCallerIdentity``;
- the bucket ``agent-bucket``.

``assume`` returns a session's keys (``ASIA...``, secret, token) from moto's
AssumeRole, signed with the broker's key. moto still enforces no session
policy (devstack/aws.py says more); presigned S3 URLs are checked and served by
``devstack.aws`` (its presigned-URL section) in front of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack.aws import ACCOUNT, REGION
from devstack.net import free_port, wait_http

ROOT = Path(__file__).resolve().parents[1]
USER = "broker"
ROLE = "agent-s3"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/{ROLE}"
BUCKET = "agent-bucket"
#: What the broker itself does with its identity: mint (the role read, AssumeRole with tags) and its health check.
BROKER_ACTIONS = ["sts:AssumeRole", "sts:TagSession", "sts:SetSourceIdentity", "sts:GetCallerIdentity", "iam:GetRole"]
SETUP_IDENTITY = {"aws_access_key_id": "setup-before-auth", "aws_secret_access_key": "unchecked-until-reset-auth"}


@dataclass(frozen=True)
class IamMoto:
    """The server (plain HTTP on loopback) and the broker's own keys for it."""

    url: str
    port: int
    broker_key_id: str
    broker_secret: str
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _client(service: str, url: str, **identity: str) -> Any:
    import boto3

    return boto3.client(service, region_name=REGION, endpoint_url=url, **identity)


def _statement(actions: list[str], **extra: Any) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, **extra}]})


def start_iam_moto() -> IamMoto:
    """A moto process on a free loopback port, the identities above made, then IAM authentication on."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "devstack.aws", str(port), "--presigned"], stdout=subprocess.DEVNULL, cwd=ROOT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/moto-api/")
        iam = _client("iam", url, **SETUP_IDENTITY)
        iam.create_user(UserName=USER)
        key = iam.create_access_key(UserName=USER)["AccessKey"]
        iam.put_user_policy(UserName=USER, PolicyName="assume", PolicyDocument=_statement(BROKER_ACTIONS, Resource="*"))
        trust = {
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/{USER}"},
            "Action": "sts:AssumeRole",
        }
        iam.create_role(
            RoleName=ROLE, AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [trust]})
        )
        allowed = ["s3:*", "sts:GetCallerIdentity"]
        iam.put_role_policy(RoleName=ROLE, PolicyName="work", PolicyDocument=_statement(allowed, Resource="*"))
        _client("s3", url, **SETUP_IDENTITY).create_bucket(Bucket=BUCKET)
        _post(f"{url}/moto-api/reset-auth", b"0")  # INITIAL_NO_AUTH_ACTION_COUNT = 0: every request is checked now
    except BaseException:
        process.terminate()
        process.wait()
        raise
    return IamMoto(url, port, key["AccessKeyId"], key["SecretAccessKey"], process)


def assume(moto: IamMoto, session_name: str = "agent", endpoint_url: str | None = None) -> dict[str, str]:
    """A session's keys for ``agent-s3`` from AssumeRole, signed with the broker's own key."""
    sts = _client(
        "sts",
        endpoint_url or moto.url,
        aws_access_key_id=moto.broker_key_id,
        aws_secret_access_key=moto.broker_secret,
    )
    credentials: dict[str, str] = sts.assume_role(RoleArn=ROLE_ARN, RoleSessionName=session_name)["Credentials"]
    return credentials


def _post(url: str, data: bytes) -> None:
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "text/plain"})
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()
