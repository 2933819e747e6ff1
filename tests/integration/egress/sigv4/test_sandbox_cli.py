"""The AWS CLI unchanged and a presigned URL fetched with curl, from inside ``broker exec --network allowlist``, with
the placeholder keys the session holds: the proxy verifies and re-signs each request (and the presigned URL's
query) for the moto that checks signatures, whose presigned URLs ``devstack.aws`` (its presigned-URL section) checks as S3 does.
"""

from __future__ import annotations

import pytest

from devstack.aws_iam import BUCKET
from tests.fixtures.aws_proxied import AwsProxied, requests_of
from tests.fixtures.sandbox import sandbox_unavailable

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]


def cli_script(aws: str) -> str:
    return f"""
echo "arn=$({aws} sts get-caller-identity --query Arn --output text)"
printf 'from the cli' > /workspace/f
{aws} s3 cp /workspace/f s3://{BUCKET}/cli/f --only-show-errors && echo cp=ok
echo "ls=$({aws} s3 ls s3://{BUCKET}/cli/ | sed 's/.* //')"
echo "got=$({aws} s3 cp s3://{BUCKET}/cli/f -)"
url=$({aws} s3 presign s3://{BUCKET}/cli/f)
echo "url=$url"
echo "presigned=$(curl -sS "$url")"
echo "tampered=$(curl -sS -w ' status=%{{http_code}}' "$(echo "$url" | sed 's#/cli/f?#/cli/g?#')" | tr -d '\\n')"
"""


def test_the_aws_cli_and_a_presigned_url_with_curl_work_unchanged_through_the_proxy(aws_proxied: AwsProxied) -> None:
    env = aws_proxied.env
    result = aws_proxied.exec(aws_proxied.task(), cli_script(str(aws_proxied.venv / "bin" / "aws")))
    assert result.code == 0, result.stdout + result.stderr
    shown = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert shown["arn"].startswith("arn:aws:sts::123456789012:assumed-role/agent-s3/"), result.stderr
    assert shown.get("cp") == "ok", result.stdout + result.stderr
    assert shown["ls"] == "f" and shown["got"] == "from the cli"
    # The URL is SigV4 (the session's config says s3v4) with the placeholder key id; curl gets the object.
    issued = next(r for r in env.log_records() if r["event"] == "credential.issued")
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in shown["url"]
    assert issued["reference"]["access_key_id"] not in shown["url"]
    assert shown["presigned"] == "from the cli"
    # A URL changed after it was signed is refused by the proxy; AWS never sees it.
    assert shown["tampered"].endswith(" status=403")
    assert "<Code>SignatureDoesNotMatch</Code>" in shown["tampered"]
    records = requests_of(env)
    gets = [r for r in records if r["method"] == "GET" and r["path"].startswith(f"/{BUCKET}/cli/")]
    assert [(r["decision"], r["upstream_status"]) for r in gets[-2:]] == [("allowed", 200), ("refused", None)]
    assert all(r["credential"] == "store" for r in records)
