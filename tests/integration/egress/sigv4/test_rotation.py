"""Proxied AWS keys renewed behind the same placeholder while ``broker exec`` runs, across real STS expiries.

Upstream is moto with IAM authentication on (it checks every signature under a key it issued) behind TLS on
loopback, started here with ``--sts-lifetime 12`` (``devstack.aws_iam.ShortSessions``): each AssumeRole session ends after
12 seconds instead of the 15 minutes asked for, and a request signed with the key of a session that has ended is
refused with ``ExpiredToken`` before it reaches moto (moto itself never checks an STS session's expiry, so the
expiry is enforced by that wrapper, as AWS enforces it). The same wrapper records the key id each request was
signed with. From inside ``exec --network allowlist`` (bubblewrap), boto3 calls STS ``GetCallerIdentity`` and
S3 ``PutObject`` (botocore's aws-chunked default) / ``GetObject`` for 34 seconds, while a slow aws-chunked upload
begun before the first renewal finishes after it. Every call must succeed: the broker renews the STS keys at
two thirds of their lifetime, the proxy re-signs with the new ones, the placeholder files never change.

The provider revokes with ``revoke = "deny-policy"``. moto does not evaluate the role's deny policy, so the
test reads what the broker wrote there while the command runs: each renewed (old) session's source identity
is denied once its successor was issued, and the session in use never is.

Before renewal reached AWS credentials, this test failed: the first keys were never renewed, so every request
after their 12 seconds was refused upstream with ``ExpiredToken``.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from devstack.aws import REGION
from devstack.aws_iam import BUCKET, ROLE, ROLE_ARN, IamMoto, start_iam_moto
from tests.fixtures.aws_iam import IamStack
from tests.fixtures.aws_proxied import AwsProxied, lines_json, py, requests_of
from tests.fixtures.brokerenv import make_env
from tests.fixtures.sandbox import sandbox_unavailable
from tests.fixtures.tls import TLSFront, make_test_ca

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

LIFETIME = 12  # seconds: an STS session's life at this moto (AWS's minimum is 15 minutes)
RUN_FOR = 34  # renewals at about 8, 16 and 24 seconds

INSIDE = py(
    f"""
import hashlib, io, json, os, threading, time
import boto3

path = os.environ["AWS_SHARED_CREDENTIALS_FILE"]
first = open(path, "rb").read()
failures, arns, calls = [], [], 0

class Slow(io.BytesIO):
    # an upload body botocore reads chunk by chunk, slowly: its request spans the first renewal
    def read(self, size=-1):
        time.sleep(0.8)
        return super().read(size)

slow_body = os.urandom(10 * 1024 * 1024)
slow = {{}}

def upload_slowly():
    s3 = boto3.client("s3")
    seen = []
    s3.meta.events.register("before-send.s3.PutObject",
                            lambda request, **_: seen.append(request.headers["x-amz-content-sha256"].decode()))
    slow["began"] = time.time()
    try:
        s3.put_object(Bucket="{BUCKET}", Key="rotating/slow", Body=Slow(slow_body))
        slow["ended"] = time.time()
        got = s3.get_object(Bucket="{BUCKET}", Key="rotating/slow")["Body"].read()
        slow["same"] = hashlib.sha256(got).hexdigest() == hashlib.sha256(slow_body).hexdigest()
        slow["payload"] = seen
    except Exception as exc:
        slow["error"] = repr(exc)

worker = threading.Thread(target=upload_slowly)
worker.start()
sts, s3 = boto3.client("sts"), boto3.client("s3")
end = time.time() + {RUN_FOR}
n = 0
while time.time() < end:
    n += 1
    try:
        arn = sts.get_caller_identity()["Arn"]
        if not arns or arns[-1] != arn:
            arns.append(arn)
        body = os.urandom(20_000)
        s3.put_object(Bucket="{BUCKET}", Key=f"rotating/{{n}}", Body=body)
        ok = s3.get_object(Bucket="{BUCKET}", Key=f"rotating/{{n}}")["Body"].read() == body
        calls += 3
        if not ok:
            failures.append(f"{{n}}: object differs")
    except Exception as exc:
        failures.append(f"{{n}}: {{exc!r}}")
    time.sleep(0.2)
worker.join()
document = json.load(open("/run/secrets/session.json"))
print(json.dumps({{"failures": failures, "arns": arns, "calls": calls, "slow": slow,
                  "unchanged": open(path, "rb").read() == first,
                  "document": {{c["name"]: c["expires_at"] for c in document["credentials"]}}}}))
"""
)


@dataclass
class Stage:
    proxied: AwsProxied
    moto: IamMoto


@pytest.fixture
def stage(tmp_path: Path) -> Iterator[Stage]:
    moto = start_iam_moto(LIFETIME, deny_policy=True)
    (tmp_path / "ca").mkdir()
    ca = make_test_ca(tmp_path / "ca", ["localhost"])
    front = TLSFront(ca.context, moto.port)
    env = make_env(tmp_path)
    env.add_provider(
        "aws",
        {
            "type": "aws_sts",
            "region": REGION,
            "endpoint_url": moto.url,
            "revoke": "deny-policy",
            "proxy_hosts": [f"127.0.0.1:{front.port}"],
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
    network: ["127.0.0.1:{front.port}"]
    grants:
      - provider: aws
        roles: ["{ROLE_ARN}"]
        actions: ["*"]
        max_ttl: 15m
"""
    )
    try:
        yield Stage(AwsProxied(env, front.port, IamStack(moto, ca, front)), moto)
    finally:
        env.cleanup()
        front.close()
        moto.stop()


def received(moto: IamMoto) -> list[dict[str, Any]]:
    """What moto's wrapper received: each request's signing key id, its session's ARN, whether it had ended."""
    with urllib.request.urlopen(f"{moto.url}/devstack-api/received", timeout=10) as answer:
        records: list[dict[str, Any]] = json.loads(answer.read())
    return records


def denied(moto: IamMoto) -> set[str] | None:
    """The source identities the role's ``BrokerRevokedSessions`` policy denies now (None: no policy)."""
    iam = boto3.client(
        "iam",
        region_name=REGION,
        endpoint_url=moto.url,
        aws_access_key_id=moto.broker_key_id,
        aws_secret_access_key=moto.broker_secret,
    )
    try:
        document = iam.get_role_policy(RoleName=ROLE, PolicyName="BrokerRevokedSessions")["PolicyDocument"]
    except iam.exceptions.NoSuchEntityException:
        return None
    values: set[str] = set()
    for statement in document["Statement"]:
        listed = statement["Condition"]["StringEquals"].get("aws:SourceIdentity", [])
        values.update([listed] if isinstance(listed, str) else listed)
    return values


def at(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(record["time"]).replace("Z", "+00:00")).timestamp()


def test_aws_keys_are_renewed_behind_one_placeholder_through_real_sts_expiries(stage: Stage) -> None:
    proxied, moto = stage.proxied, stage.moto
    env = proxied.env
    task = proxied.task()
    snapshots: list[tuple[float, set[str]]] = []
    running = threading.Event()
    running.set()

    def watch() -> None:  # the role's deny policy as the broker leaves it, while the command runs
        while running.is_set():
            snapshots.append((time.time(), denied(moto) or set()))
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = env.run_process(*proxied.argv(task, INSIDE), env=proxied.process_env(), timeout=RUN_FOR + 120)
    finally:
        running.clear()
        watcher.join()
    assert result.code == 0, result.stdout + result.stderr
    seen = lines_json(result)
    assert seen["failures"] == [], seen["failures"]
    assert seen["calls"] > 30 and seen["unchanged"]

    records = env.log_records()
    renewed = [r for r in records if r["event"] == "credential.renewed"]
    issued = [r for r in records if r["event"] == "credential.issued"]
    assert len(renewed) >= 3, len(renewed)
    assert len(issued) == 1 + len(renewed)
    # Each generation is its own STS session: the sandbox's GetCallerIdentity saw them one after another.
    names = [r["reference"]["role_session_name"] for r in issued]
    assert len(set(names)) == len(names)
    assert [arn.rsplit("/", 1)[1] for arn in seen["arns"]] == names[: len(seen["arns"])]
    assert len(seen["arns"]) >= 1 + len(renewed) - 1  # the last may be issued as the command ends

    # What moto received: the key id of every generation, none after its session had ended.
    upstream = [r for r in received(moto) if r["key_id"].startswith("ASIA")]
    key_ids = [r["reference"]["access_key_id"] for r in issued]
    assert [k for k in key_ids if any(u["key_id"] == k for u in upstream)] == key_ids[: len(seen["arns"])]
    assert not [u for u in upstream if u["expired"]]
    assert not [r for r in requests_of(env) if r.get("decision") == "refused"]

    # The slow upload began on the first keys and finished, in one piece, after they were replaced.
    slow = seen["slow"]
    assert "error" not in slow and slow["same"], slow
    assert slow["payload"] == ["STREAMING-UNSIGNED-PAYLOAD-TRAILER"]
    swaps = [at(r) for r in issued if r.get("renewal_of")]
    assert slow["began"] < swaps[0] < slow["ended"]
    slow_put = next(u for u in upstream if u["method"] == "PUT" and u["path"].endswith("/rotating/slow"))
    assert slow_put["key_id"] == key_ids[0]

    # The first keys were revoked only after the upload re-signed with them was over (or they had ended).
    retired = [r for r in records if r["event"] == "credential.revoked" and r["reason"] == "renewed"]
    assert at(retired[0]) >= slow["ended"] - 0.5 or retired[0]["outcome"] == "expired"

    # Revocation by deny policy named each replaced session after its successor was issued, never the one in use;
    # a replaced session that had ended by then needed no deny (outcome "expired").
    ended = min(at(r) for r in records if r["event"] == "credential.revoked" and r.get("reason") != "renewed")
    identities = [r["reference"]["source_identity"] for r in issued]
    for moment, values in snapshots:
        if moment >= ended - 1:
            continue
        for value in values:
            generation = identities.index(value)
            assert at(issued[generation + 1]) < moment, (value, moment)
    before_end = set().union(*(values for moment, values in snapshots if moment < ended - 1))
    denied_renewals = {r["reference"]["source_identity"] for r in retired if r["outcome"] == "revoked"}
    assert len(denied_renewals) >= 2
    assert denied_renewals - {identities[len(renewed) - 1]} <= before_end  # the last may be denied as it ends
    final = denied(moto) or set()
    assert denied_renewals | {identities[-1]} <= final <= set(identities)  # the session's revocation: the last
    reasons = [r["reason"] for r in records if r["event"] == "credential.revoked"]
    assert reasons.count("renewed") == len(renewed)

    # session.json names when the keys in use end: a renewed generation's, no longer the first's.
    assert seen["document"]["store"] in {r["expires_at"] for r in renewed}
    assert seen["document"]["store"] != issued[0]["expires_at"]
    assert env.run("audit", "verify").code == 0
