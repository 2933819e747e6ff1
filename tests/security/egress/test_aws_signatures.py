"""Attacks on an AWS session's proxy from inside ``broker exec --network allowlist``: requests signed with another
key, secret or token, a body changed after signing, SigV4A. Each is refused with 403 and the XML error boto3
prints, and nothing of it reaches AWS (moto with IAM authentication on, behind TLS: ``tests.fixtures.aws_proxied``).
"""

from __future__ import annotations

import json

import pytest

from devstack.aws_iam import BUCKET
from tests.fixtures.aws_proxied import AwsProxied, lines_json, py, refusals_of, requests_of
from tests.fixtures.sandbox import sandbox_unavailable

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]


ATTACKS = py(
    f"""
import configparser, json, os
import boto3
from botocore.exceptions import ClientError

cfg = configparser.ConfigParser()
cfg.read(os.environ["AWS_SHARED_CREDENTIALS_FILE"])
held = cfg["default"]
key_id, secret, token = held["aws_access_key_id"], held["aws_secret_access_key"], held["aws_session_token"]

def attempt(name, call):
    try:
        call()
        print(json.dumps({{name: "passed"}}))
    except ClientError as error:
        print(json.dumps({{name: [error.response["ResponseMetadata"]["HTTPStatusCode"],
                                  error.response["Error"]["Code"], error.response["Error"]["Message"]]}}))

def client(service, key=key_id, secret=secret, token=token):
    return boto3.client(service, aws_access_key_id=key, aws_secret_access_key=secret, aws_session_token=token)

attempt("wrong_key", lambda: client("sts", key="ASIA" + "Q" * 16).get_caller_identity())
attempt("wrong_secret", lambda: client("sts", secret="x" * 40).get_caller_identity())
attempt("wrong_token", lambda: client("sts", token="T" * len(token)).get_caller_identity())
attempt("wrong_secret_s3", lambda: client("s3", secret="x" * 40).put_object(Bucket="{BUCKET}", Key="x", Body=b"x"))
tampered = client("sts")
def tamper(request, **_):
    body = request.body if isinstance(request.body, bytes) else request.body.encode()
    request.body = body.replace(b"GetCallerIdentity", b"GetSessionTokenXX")  # the same length
tampered.meta.events.register("before-send.sts.GetCallerIdentity", tamper)
attempt("tampered_body", tampered.get_caller_identity)
print(json.dumps({{"key_id": key_id}}))
"""
)

SIGV4A = r"""
echo "v4a=$(curl -sS -w ' status=%{http_code}' \
  -H "X-Amz-Date: $(date -u +%Y%m%dT%H%M%SZ)" -H 'X-Amz-Region-Set: *' \
  -H 'X-Amz-Content-Sha256: UNSIGNED-PAYLOAD' \
  -H "Authorization: AWS4-ECDSA-P256-SHA256 Credential=$(sed -n 's/^aws_access_key_id = //p' \
$AWS_SHARED_CREDENTIALS_FILE)/$(date -u +%Y%m%d)/s3/aws4_request, SignedHeaders=host;x-amz-date;x-amz-region-set, \
Signature=3045022100aa" "https://127.0.0.1:PORT/agent-bucket?list-type=2" | tr -d '\n')"
"""


def test_a_request_signed_otherwise_or_tampered_is_refused_with_the_xml_error_and_nothing_goes_upstream(
    aws_proxied: AwsProxied,
) -> None:
    env = aws_proxied.env
    script = ATTACKS + SIGV4A.replace("PORT", str(aws_proxied.port))
    result = aws_proxied.exec(aws_proxied.task(), script)
    assert result.code == 0, result.stdout + result.stderr
    seen = lines_json(result)
    assert seen["wrong_key"][:2] == [403, "InvalidClientTokenId"]
    assert seen["wrong_secret"][:2] == [403, "SignatureDoesNotMatch"]
    assert "placeholder" in seen["wrong_secret"][2]
    assert seen["wrong_token"][:2] == [403, "InvalidClientTokenId"]
    assert seen["wrong_secret_s3"][:2] == [403, "SignatureDoesNotMatch"]
    assert seen["tampered_body"][:2] == [403, "SignatureDoesNotMatch"]
    v4a = next(line for line in result.stdout.splitlines() if line.startswith("v4a="))
    assert v4a.endswith(" status=403"), result.stdout + result.stderr
    assert "<Code>InvalidRequest</Code>" in v4a and "SigV4A" in v4a
    # Nothing of these reached AWS; each is an egress.request record refused, and counted as egress.refused.
    records = requests_of(env)
    assert len(records) == 6
    assert all(r["decision"] == "refused" and r["upstream_status"] is None for r in records), records
    assert all(r["status"] == 403 and "refused: sigv4: " in r["reason"] for r in records), json.dumps(records)
    (counted,) = refusals_of(env)
    assert counted["reason"] == "credential" and counted["count"] == 6
    assert counted["destination"] == f"127.0.0.1:{aws_proxied.port}"
