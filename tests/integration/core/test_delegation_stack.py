"""Delegation with every provider, for real: a child of a GitHub token, an AWS session and a Vault token, minted
narrower at the GitHub App emulator, moto and OpenBao, asked for from inside bubblewrap; wider ones refused.

moto does not enforce session policies: the test checks the session policy
the broker sends for the child (the one its log records), contained in the
parent's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from devstack.aws import ROLE_ARN
from devstack.config import STACK_POLICY
from devstack.github_app import GitHubAppEmulator
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.delegating import write_children
from tests.fixtures.openbao import OpenBao
from tests.fixtures.sandbox import sandbox_unavailable

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

POLICY = STACK_POLICY.replace("    max_ttl: 1h\n", "    max_ttl: 1h\n    delegate: true\n", 1).replace(
    "        max_ttl: 15m\n", "        max_ttl: 1h\n", 1
)
READ = {"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": ["arn:aws:s3:::ci-artifacts/*"]}
PARENT = {
    "version": 1,
    "task": "fix-stack-1",
    "ttl": "45m",
    "sandbox": {"uid": 1000, "gid": 1000, "mount_path": "/run/secrets"},
    "credentials": [
        {
            "name": "repo",
            "provider": "github",
            "repositories": ["octo-org/widgets", "octo-org/docs-site"],
            "permissions": {"contents": "write", "pull_requests": "write"},
        },
        {
            "name": "artifacts",
            "provider": "aws",
            "role_arn": ROLE_ARN,
            "ttl": "40m",
            "session_policy": {"Version": "2012-10-17", "Statement": [READ]},
        },
        {"name": "kv", "provider": "vault", "policies": ["ci-read", "ci-write"], "ttl": "30m", "num_uses": 20},
    ],
}
NARROW_AWS = {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::ci-artifacts/build/*"]}
NARROW: dict[str, Any] = {
    "version": 1,
    "task": "fix-stack-sub",
    "ttl": "20m",
    "credentials": [
        {
            "name": "repo",
            "provider": "github",
            "repositories": ["octo-org/widgets"],
            "permissions": {"contents": "read"},
        },
        {
            "name": "artifacts",
            "provider": "aws",
            "role_arn": ROLE_ARN,
            "ttl": "15m",
            "session_policy": {"Version": "2012-10-17", "Statement": [NARROW_AWS]},
        },
        {"name": "kv", "provider": "vault", "policies": ["ci-read"], "ttl": "10m", "num_uses": 3},
    ],
}


def _wider(index: int, **credential: Any) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(json.dumps(NARROW))
    document["credentials"] = [{**document["credentials"][index], **credential}]
    return document


WIDER = {
    "repository": (_wider(0, repositories=["octo-org/secret-infra"]), "credentials[0].repositories[0]"),
    "permission": (_wider(0, permissions={"contents": "read", "issues": "write"}), "credentials[0].permissions.issues"),
    "level": (_wider(0, permissions={"pull_requests": "write", "contents": "write"}), None),  # as wide: covered
    "action": (
        _wider(1, session_policy={"Version": "2012-10-17", "Statement": [{**NARROW_AWS, "Action": ["s3:PutObject"]}]}),
        "credentials[0].session_policy.Statement[0]",
    ),
    "resource": (
        _wider(1, session_policy={"Version": "2012-10-17", "Statement": [{**READ, "Resource": ["arn:aws:s3:::*"]}]}),
        "credentials[0].session_policy.Statement[0]",
    ),
    "no-policy": (_wider(1, session_policy=None), "credentials[0].session_policy"),
    "vault": (_wider(2, policies=["ci-admin"]), "credentials[0].policies[0]"),
}
SCRIPT = r"""
for name in NAMES; do
  curl -sS --unix-socket "$BROKER_SOCKET" -o "/workspace/$name.out" -w "$name %{http_code}\n" -X POST \
       --data-binary "@/workspace/$name.json" http://broker/v1/sessions
done
CHILD=$(sed -n 's/^  "session": "\(s-[a-z0-9]*\)",$/\1/p' /workspace/narrow.out)
for f in repo/token artifacts/credentials kv/token; do test -r "/run/secrets/children/$CHILD/$f" && echo "read $f"; done
"""


def test_children_of_every_provider_are_minted_narrower_and_wider_ones_are_refused(
    stack_env: BrokerEnv, openbao: OpenBao, github_emulator: GitHubAppEmulator, tmp_path: Path
) -> None:
    stack_env.write_policy(POLICY)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    cleaned = {name: document for name, (document, _) in WIDER.items()}
    for document in cleaned.values():
        document["credentials"] = [{k: v for k, v in c.items() if v is not None} for c in document["credentials"]]
    write_children(workspace, {"narrow": NARROW, **cleaned})
    task = stack_env.write_task(json.dumps(PARENT), "parent.json")
    script = SCRIPT.replace("NAMES", " ".join(["narrow", *WIDER]))
    result = stack_env.run_process("exec", "--task", str(task), "--workspace", str(workspace), "--", "sh", "-c", script)
    assert result.code == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "narrow 201" in lines and {"read repo/token", "read artifacts/credentials", "read kv/token"} <= set(lines)
    for name, (_, key) in WIDER.items():
        answer = json.loads((workspace / f"{name}.out").read_text())
        if key is None:
            assert f"{name} 201" in lines, answer
            continue
        assert f"{name} 403" in lines and answer["exit_code"] == 3 and f"{key}:" in answer["error"], (name, answer)
    child = json.loads((workspace / "narrow.out").read_text())["session"]
    issued = {(r["session"], r["credential"]): r for r in stack_env.log_records() if r["event"] == "credential.issued"}
    asked = [call.body for call in github_emulator.calls_to("create_token")]
    assert {"repositories": ["widgets"], "permissions": {"contents": "read"}} in [
        {k: body[k] for k in ("repositories", "permissions")} for body in asked if isinstance(body, dict)
    ]
    assert issued[(child, "artifacts")]["scope"]["session_policy"]["Statement"] == [
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::ci-artifacts/build/*"]}
    ]
    assert issued[(child, "kv")]["scope"]["policies"] == ["ci-read"]
    assert {r["parent"] for (session, _), r in issued.items() if session == child} == {issued[(child, "kv")]["parent"]}
    # the exec ended: every child's credential revoked with the parent's
    outcomes = {
        (r["session"], r["credential"]): r["outcome"]
        for r in stack_env.log_records()
        if r["event"] == "credential.revoked"
    }
    assert set(outcomes) == set(issued) and set(outcomes.values()) == {"revoked"}
    assert not openbao.accessor_exists(issued[(child, "kv")]["reference"]["accessor"])
    assert {github_emulator.token_state(token) for token in github_emulator.state.tokens} == {"revoked"}
