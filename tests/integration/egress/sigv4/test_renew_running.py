"""``broker renew --session S`` of a running exec's proxied AWS keys: renewed now, behind the same placeholder keys.

moto checks every signature (IAM authentication on) behind a TLS front; the
session's STS keys last 15 minutes, so the exec would not renew them during
the test by itself. From inside ``exec --network allowlist`` (bubblewrap)
boto3 asks STS who it is, then waits; ``broker renew`` makes the exec
assume the role again and hand the proxy the new key id, secret and token;
boto3 asks again with the same placeholder files and is answered as the new
STS session. Before AWS keys could be renewed behind their placeholder,
``renew`` answered ``cannot`` (exit 2) and the second answer named the first
session.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.aws_proxied import AwsProxied, lines_json, py, requests_of
from tests.fixtures.brokerenv import Result
from tests.fixtures.sandbox import sandbox_unavailable

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

INSIDE = py(
    """
import json, os, time
import boto3

path = os.environ["AWS_SHARED_CREDENTIALS_FILE"]
first = open(path, "rb").read()
sts = boto3.client("sts")
before = sts.get_caller_identity()["Arn"]
with open("/workspace/before.tmp", "w") as out:
    out.write(before)
os.rename("/workspace/before.tmp", "/workspace/before")
while not os.path.exists("/workspace/go"):
    time.sleep(0.05)
after = sts.get_caller_identity()["Arn"]
print(json.dumps({"before": before, "after": after, "unchanged": open(path, "rb").read() == first}))
"""
)


def wait_for(path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"the command never wrote {path.name}"
        time.sleep(0.05)


def test_renew_makes_the_running_exec_renew_its_aws_keys_now(aws_proxied: AwsProxied, tmp_path: Path) -> None:
    env = aws_proxied.env
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    argv = aws_proxied.argv(aws_proxied.task(), INSIDE, "--workspace", str(workspace))
    process = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "--config", str(env.config_path), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=aws_proxied.process_env(),
    )
    try:
        wait_for(workspace / "before")
        session = next(r for r in env.log_records() if r["event"] == "session.issued")["session"]
        renewed = env.run_process("renew", "--session", session, "--json", env=aws_proxied.process_env())
        assert renewed.code == 0, renewed.stderr
        (item,) = renewed.json()
        assert (item["name"], item["outcome"], item["proxied"]) == ("store", "renewed", "true"), item
        (workspace / "go").touch()
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, out + err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    seen = lines_json(Result(0, out, err))
    assert seen["unchanged"], "the placeholder files changed"
    records = env.log_records()
    issued = [r for r in records if r["event"] == "credential.issued"]
    assert len(issued) == 2 and issued[1]["renewal_of"] == "store~1"
    names = [r["reference"]["role_session_name"] for r in issued]
    assert [seen["before"].rsplit("/", 1)[1], seen["after"].rsplit("/", 1)[1]] == names
    assert [r["credential"] for r in records if r["event"] == "credential.renewed"] == ["store"]
    assert not [r for r in requests_of(env) if r.get("decision") == "refused"]
    assert env.run("audit", "verify").code == 0
