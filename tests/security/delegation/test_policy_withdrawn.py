"""A grant the operator withdraws while an exec runs stops the children its sandbox asks for, at once.

A delegating exec runs in bubblewrap; its sandbox asks its ``broker.sock``
for a child (``curl --unix-socket``, as an agent's launcher of sub-agents
would) and gets one. The operator then replaces the policy file with one
that no longer grants the session's Vault policy: a fresh ``broker issue``
of the same task is denied. The sandbox asks again: the exec used to decide
with the policy it read when it started and minted another Vault token for
the child; now the child is refused (exit 3, naming the session the policy
no longer allows), nothing is minted, and ``session.policy_withdrawn`` is
logged once however often the sandbox asks. With ``[egress]
policy_refresh`` short, the withdrawal is logged while nothing asks at all.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.crash import broker_process
from tests.fixtures.delegating import DELEGATE_POLICY, PARENT_TASK, child, write_children
from tests.fixtures.sandbox import sandbox_unavailable
from tests.integration.host.test_exec import workspace

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

WITHDRAWN_POLICY = DELEGATE_POLICY.format(depth=1).replace('policies: ["ci-*"]', 'policies: ["other-*"]')

INSIDE = r"""
ask() { curl -sS --noproxy '*' --unix-socket "$BROKER_SOCKET" -o "/workspace/$1.out" -w '%{http_code}' \
  -X POST --data-binary @/workspace/child.json "http://broker/v1/$2"; }
step() { echo "$2" > "/workspace/$1.tmp" && mv "/workspace/$1.tmp" "/workspace/$1"; }
wait_for() { while [ ! -e "/workspace/$1" ]; do sleep 0.05; done; }
step before "first=$(ask first sessions)"
wait_for go
step after "second=$(ask second sessions) check=$(ask check policy/check) third=$(ask third sessions)"
"""


def _wait(path: Path, process: subprocess.Popen[str], timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"the exec ended before {path.name}: {process.communicate()[1].strip()}")
        assert time.monotonic() < deadline, f"the command never reached {path.name}"
        time.sleep(0.05)
    return path.read_text().strip()


def _withdrawals(env: BrokerEnv) -> list[dict[str, object]]:
    return [r for r in env.log_records() if r["event"] == "session.policy_withdrawn"]


def test_a_running_exec_gives_no_child_once_its_grant_is_withdrawn(vault_env: BrokerEnv, tmp_path: Path) -> None:
    env = vault_env
    env.write_policy(DELEGATE_POLICY.format(depth=1))
    task = env.write_task(PARENT_TASK)
    shared = workspace(tmp_path)
    write_children(shared, {"child": child()})
    process = broker_process(env, "exec", "--task", str(task), "--workspace", str(shared), "--", "sh", "-c", INSIDE)
    try:
        assert _wait(shared / "before", process) == "first=201"
        parent = json.loads((shared / "first.out").read_text())["parent"]
        env.write_policy(WITHDRAWN_POLICY)  # the operator takes the grant away
        fresh = env.run_process("issue", "--task", str(task))
        assert fresh.code == 3, fresh.stderr  # what a new session of the task gets now
        (shared / "go").touch()
        assert _wait(shared / "after", process) == "second=403 check=403 third=403"
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    second = json.loads((shared / "second.out").read_text())
    assert second["exit_code"] == 3 and f"the policy no longer allows session {parent}" in second["error"], second
    assert "rule agents" in second["error"]
    minted = [r for r in env.log_records() if r["event"] == "credential.issued" and r.get("parent")]
    assert len(minted) == 1, "a child was minted after the grant was withdrawn"
    [withdrawn] = _withdrawals(env)
    assert withdrawn["session"] == parent and "no longer allows this session" in str(withdrawn["reason"])
    assert env.run("audit", "verify").code == 0


def test_a_withdrawal_is_logged_within_policy_refresh_while_nothing_asks(vault_env: BrokerEnv, tmp_path: Path) -> None:
    env = vault_env
    env.tables["egress"] = {"policy_refresh": "1s"}
    env.write_config()
    env.write_policy(DELEGATE_POLICY.format(depth=1))
    task = env.write_task(PARENT_TASK)
    shared = workspace(tmp_path)
    wait = "touch /workspace/before; while [ ! -e /workspace/go ]; do sleep 0.05; done"
    process = broker_process(env, "exec", "--task", str(task), "--workspace", str(shared), "--", "sh", "-c", wait)
    try:
        _wait(shared / "before", process)
        env.write_policy(WITHDRAWN_POLICY)
        deadline = time.monotonic() + 30
        while not _withdrawals(env) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_withdrawals(env)) == 1, "the running exec never noticed the withdrawn grant"
        time.sleep(2.5)  # the exec decides again at least twice more meanwhile
        assert len(_withdrawals(env)) == 1, "a withdrawal is logged once"
        (shared / "go").touch()
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    events = [r["event"] for r in env.log_records() if r["event"] != "checkpoint"]
    assert events.index("session.policy_withdrawn") < events.index("session.revoked")
