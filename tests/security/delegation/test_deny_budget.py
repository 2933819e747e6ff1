"""A sandbox churning AWS children cannot take the role's deny budget from everyone else.

With ``revoke = "deny-policy"`` each revoked session leaves a Deny entry on
its role until its credentials expire, and an issue is refused once the
role's 10,240 inline-policy characters could not hold its revocation. Through
``broker.sock`` a delegating session's sandbox created and revoked children
in a loop until the role was full: then every other session of that role,
of any requester and team, was refused for the next hour or two. Now child
sessions may fill only three quarters of the characters (the rest is kept
for the sessions the policy issues) and at most ``delegate_rate`` a minute.

A real ``broker exec`` in bubblewrap (uid 1000), moto with IAM
authentication (the broker an IAM user allowed to write the role's deny
policy); the role carries an operator's inline policy leaving children room
for about three revocations below their share, and everyone else about 150 more.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from devstack.aws import REGION
from devstack.aws_iam import ROLE, ROLE_ARN, IamMoto, start_iam_moto
from providers.aws.deny_policy.layout import POLICY_NAME, ROLE_INLINE_BUDGET, DenyList, entries_for, policy_size
from providers.aws.names import generation_names
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.delegating import SOCKET_CLIENT
from tests.fixtures.sandbox import python_runtime, sandbox_unavailable

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

POLICY = f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    delegate: true
    grants:
      - provider: aws
        roles: ["{ROLE_ARN}"]
        actions: ["*"]
        max_ttl: 30m
  - id: other-team
    tasks: ["deploy-*"]
    sandbox_uids: [1001]
    sandbox_gids: [1001]
    grants:
      - provider: aws
        roles: ["{ROLE_ARN}"]
        actions: ["*"]
        max_ttl: 30m
"""
TASK = """
version: 1
task: {task}
ttl: 30m
sandbox: {{uid: {uid}, gid: {uid}, mount_path: /run/secrets}}
credentials:
  - name: store
    provider: aws
    role_arn: {role}
    ttl: 20m
"""
#: The promise: child sessions fill at most three quarters of the role's inline-policy characters.
CHILDREN_SHARE = ROLE_INLINE_BUDGET * 3 // 4
PARENT_CREDENTIAL_TTL = timedelta(minutes=20)
CHILD_TTL, CHILD_CREDENTIAL_TTL = timedelta(minutes=16), timedelta(minutes=15)
CHILD = {
    "version": 1,
    "task": "fix-aws-sub",
    "ttl": "16m",
    "credentials": [{"name": "store", "provider": "aws", "role_arn": ROLE_ARN, "ttl": "15m"}],
}
CHURN = r"""
made, status, refusal = 0, None, None
for _ in range(400):
    status, body = call("POST", "/v1/sessions", CHILD)
    if status != 201:
        refusal = json.loads(body)
        break
    made += 1
    call("DELETE", "/v1/sessions/" + json.loads(body)["session"])
print(json.dumps({"made": made, "status": status, "refusal": refusal}))
"""


class Stage:
    def __init__(self, env: BrokerEnv, moto: IamMoto) -> None:
        self.env = env
        self.moto = moto
        self.iam = boto3.client(
            "iam",
            region_name=REGION,
            endpoint_url=moto.url,
            aws_access_key_id=moto.broker_key_id,
            aws_secret_access_key=moto.broker_secret,
        )

    def process_env(self) -> dict[str, str]:
        """The broker's own identity (moto's IAM user); nothing from ~/.aws."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "AWS_ACCESS_KEY_ID": self.moto.broker_key_id,
            "AWS_SECRET_ACCESS_KEY": self.moto.broker_secret,
            "AWS_CONFIG_FILE": str(self.env.root / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(self.env.root / "no-aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def inline_sizes(self) -> dict[str, int]:
        """Each inline policy of the role, by name: its characters as IAM counts them."""
        names = self.iam.list_role_policies(RoleName=ROLE)["PolicyNames"]
        return {
            name: policy_size(self.iam.get_role_policy(RoleName=ROLE, PolicyName=name)["PolicyDocument"])
            for name in names
        }

    def put_filler(self, size: int) -> None:
        """An operator's inline policy of ``size`` characters on the role."""
        rule = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": ""}
        document = {"Version": "2012-10-17", "Statement": [rule]}
        rule["Resource"] = "arn:aws:s3:::" + "f" * (size - policy_size(document) - len("arn:aws:s3:::"))
        assert policy_size(document) == size
        self.iam.put_role_policy(RoleName=ROLE, PolicyName="operator", PolicyDocument=json.dumps(document))


@pytest.fixture
def stage(tmp_path: Path) -> Iterator[Stage]:
    moto = start_iam_moto(deny_policy=True)
    env = make_env(tmp_path)
    env.add_provider("aws", {"type": "aws_sts", "region": REGION, "endpoint_url": moto.url, "revoke": "deny-policy"})
    env.write_policy(POLICY)
    try:
        yield Stage(env, moto)
    finally:
        env.cleanup()
        moto.stop()


def _other_teams_issue(stage: Stage) -> Any:
    task = stage.env.write_task(TASK.format(task="deploy-9", uid=1001, role=ROLE_ARN), "other.yaml")
    return stage.env.run_process("issue", "--task", str(task), "--json", env=stage.process_env())


def _deny_size_with_children(live: list[Any], children: int, now: datetime) -> int:
    """What the role's deny policy would take for the ``live`` entries, the parent's, ``children`` revoked children
    and one more (its expiry as the reservation puts it: with and without its slack), at ``now``: the reservation's
    measure."""
    entries = [*live, *entries_for("", "s-parent000000", now + PARENT_CREDENTIAL_TTL)]
    for index in range(children):
        entries += entries_for("", f"s-child{index:07d}", now + CHILD_CREDENTIAL_TTL)
    sizes = []
    for slack in (timedelta(0), timedelta(minutes=10)):
        expires = min(now + CHILD_CREDENTIAL_TTL + slack, now + CHILD_TTL)
        sizes.append(policy_size(DenyList().merged([*entries, *entries_for("", "s-childnext000", expires)]).document()))
    return max(sizes)


def _room_for_three_children(live: list[Any]) -> int:
    """The deny policy's size that lets three children in and not a fourth, the same for the next minute (an
    hour's end moving a child's entry into a bucket of its own in between would change it)."""
    while True:
        now = datetime.now(UTC)
        sizes = [_deny_size_with_children(live, 2, moment) for moment in (now, now + timedelta(seconds=60))]
        if sizes[0] == sizes[1]:
            return sizes[0] + 8  # a fourth needs 17 more
        time.sleep(30)


def test_a_sandbox_churning_aws_children_leaves_the_role_room_for_other_teams(stage: Stage, tmp_path: Path) -> None:
    before = _other_teams_issue(stage)  # another team's session, left live
    assert before.code == 0, before.stderr
    other = before.json()
    [credential] = other["credentials"]
    expires = datetime.fromisoformat(credential["expires_at"].replace("Z", "+00:00"))
    _, source_identity = generation_names(other["session"], "store", 0)
    live = list(entries_for("", source_identity, expires))
    others = sum(size for name, size in stage.inline_sizes().items() if name != POLICY_NAME)
    stage.put_filler(CHILDREN_SHARE - others - _room_for_three_children(live))

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    python, prefix = python_runtime()
    parent = stage.env.write_task(TASK.format(task="fix-aws-1", uid=1000, role=ROLE_ARN), "parent.yaml")
    program = SOCKET_CLIENT + f"CHILD = json.loads({json.dumps(json.dumps(CHILD))})\n" + CHURN
    result = stage.env.run_process(
        "exec", "--task", str(parent), "--workspace", str(workspace), "--ro-bind", prefix,
        "--", python, "-I", "-c", program,
        env=stage.process_env(), timeout=600,
    )  # fmt: skip
    assert result.code == 0, result.stdout + result.stderr
    churn = json.loads(result.stdout.strip().splitlines()[-1])

    after = _other_teams_issue(stage)
    assert after.code == 0, (churn, after.stderr)  # the role had been full: "would need 10248 of the 10240"
    # the children stopped at their share of the role, before the rate would have stopped them
    assert churn["made"] == 3 and churn["status"] == 403, churn
    refusal = churn["refusal"]["error"]
    assert "revoking this child session as well would need" in refusal and "child sessions may fill" in refusal
    sizes = stage.inline_sizes()
    denied = DenyList.parse(stage.iam.get_role_policy(RoleName=ROLE, PolicyName=POLICY_NAME)["PolicyDocument"])
    children = [r["session"] for r in stage.env.log_records() if r["event"] == "session.issued" and r.get("parent")]
    assert len(children) == churn["made"] and set(children) <= set(denied.values("aws:SourceIdentity"))
    assert sum(sizes.values()) <= ROLE_INLINE_BUDGET  # the parent's own revocation (when the exec ended) fitted too
