"""The AWS CLI (awscli from PyPI, which carries its own botocore) unchanged, signing with placeholder keys, through
the SigV4 verifier to the moto that checks signatures: the commands work, a wrong key is refused with the XML
error the CLI prints, and a presigned URL is SigV4 once the config says ``signature_version = s3v4``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from broker.egress.injectors.sigv4 import AwsKeys, Head, Reason, Refusal, Verifier
from tests.fixtures.aws_iam import BUCKET, AwsSession, IamStack
from tests.fixtures.sigv4_front import ResigningFront

pytestmark = pytest.mark.server
AWS = Path(sys.executable).with_name("aws")


def cli(keys: AwsKeys, ca: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(config.parent),
        "AWS_ACCESS_KEY_ID": keys.access_key_id,
        "AWS_SECRET_ACCESS_KEY": keys.secret_access_key.reveal(),
        "AWS_SESSION_TOKEN": keys.session_token.reveal() if keys.session_token else "",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CA_BUNDLE": str(ca),
        "AWS_CONFIG_FILE": str(config),
        "AWS_SHARED_CREDENTIALS_FILE": str(config.parent / "no-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_MAX_ATTEMPTS": "1",
    }
    return subprocess.run([str(AWS), *args], env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    if not AWS.exists() and shutil.which("aws") is None:
        pytest.skip("the AWS CLI (awscli, in the test extra) is not installed")
    path = tmp_path / "config"
    path.write_text("[default]\ns3 =\n    signature_version = s3v4\n")
    return path


def test_the_aws_cli_works_through_the_verifier(
    iam_moto: IamStack, aws_session: AwsSession, resigning_front: ResigningFront, config: Path, tmp_path: Path
) -> None:
    ca, url, keys = iam_moto.ca.cert_file, resigning_front.url, aws_session.placeholder
    identity = cli(keys, ca, config, "sts", "get-caller-identity", "--endpoint-url", url)
    assert identity.returncode == 0, identity.stderr
    assert json.loads(identity.stdout)["Arn"].endswith("assumed-role/agent-s3/agent")
    data = os.urandom(9 * 1024 * 1024 + 5)  # over the CLI's 8 MiB threshold: a multipart upload
    (tmp_path / "up.bin").write_bytes(data)
    up = cli(keys, ca, config, "s3", "cp", str(tmp_path / "up.bin"), f"s3://{BUCKET}/cli/up.bin", "--endpoint-url", url)
    assert up.returncode == 0, up.stderr
    assert any(b"uploadId=" in c.head.target for c in resigning_front.received)  # the parts went through the verifier
    down = cli(
        keys, ca, config, "s3", "cp", f"s3://{BUCKET}/cli/up.bin", str(tmp_path / "down.bin"), "--endpoint-url", url
    )
    assert down.returncode == 0, down.stderr
    assert (tmp_path / "down.bin").read_bytes() == data
    listing = cli(keys, ca, config, "s3", "ls", f"s3://{BUCKET}/cli/", "--endpoint-url", url)
    assert listing.returncode == 0 and "up.bin" in listing.stdout
    assert resigning_front.refusals == []


def test_the_aws_cli_prints_the_refusal(
    iam_moto: IamStack, aws_session: AwsSession, resigning_front: ResigningFront, config: Path
) -> None:
    other = AwsKeys(
        aws_session.placeholder.access_key_id, aws_session.real.secret_access_key, aws_session.placeholder.session_token
    )
    result = cli(
        other, iam_moto.ca.cert_file, config, "s3", "ls", f"s3://{BUCKET}/", "--endpoint-url", resigning_front.url
    )
    assert result.returncode != 0
    assert "An error occurred (SignatureDoesNotMatch)" in result.stderr
    assert "broker egress proxy" in result.stderr
    assert aws_session.real.secret_access_key.reveal() not in result.stderr


def test_a_cli_presigned_url_is_sigv4_with_the_s3v4_setting_and_refused_without(
    aws_session: AwsSession, config: Path
) -> None:
    keys = aws_session.placeholder
    verifier = Verifier(keys, aws_session.real)
    for setting, accepted in ((config, True), (config.parent / "no-config", False)):
        result = cli(
            keys, config, setting, "s3", "presign", f"s3://{BUCKET}/k", "--endpoint-url", "https://127.0.0.1:9"
        )
        assert result.returncode == 0, result.stderr
        parts = urlsplit(result.stdout.strip())
        verdict = verifier.begin(
            Head(b"GET", f"{parts.path}?{parts.query}".encode(), ((b"host", parts.netloc.encode()),))
        )
        if accepted:
            assert not isinstance(verdict, Refusal), verdict
            verdict.close()
        else:
            assert isinstance(verdict, Refusal) and verdict.reason is Reason.UNSUPPORTED and "s3v4" in verdict.message
