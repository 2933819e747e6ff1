"""What ``broker session allow`` never widens: a child's coverage, a child itself, an approved manifest.

The allow changes the running proxy, never the session's stored manifest: a
child session is covered by its parent's manifest as issued, so a
destination allowed later is refused to a child (exit 3 naming
``network.allow[0]``) while one the parent was issued with is covered. A
child runs behind its parent's proxy: an allow for the child itself is
refused (exit 2). An allow under a rule that asks for an approval (since
the exec began: its policy is read again) is refused (exit 3): the approval
was for the manifest as it was.
"""

from __future__ import annotations

import json
import os

from tests.fixtures.crash import broker_process
from tests.fixtures.delegating import PARENT_TASK, child, write_children
from tests.integration.egress.test_session_allow import Running, policy, running, task_text

__all__ = ["running"]  # fixture

ASK = r"""
ask() { curl -sS --noproxy '*' --unix-socket "$BROKER_SOCKET" -o "/workspace/$1.out" -w '%{http_code}' \
  -X POST --data-binary "@/workspace/$1.json" http://broker/v1/sessions; }
step() { echo "$2" > "/workspace/$1.tmp" && mv "/workspace/$1.tmp" "/workspace/$1"; }
wait_for() { while [ ! -e "/workspace/$1" ]; do sleep 0.05; done; }
step before ok
wait_for go1
step asked "later=$(ask later) covered=$(ask covered)"
wait_for go2
"""


def delegating_policy(a: int, b: int) -> str:
    return f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["127.0.0.1:{a}", "127.0.0.1:{b}"]
    delegate: true
    delegate_depth: 1
    grants:
      - provider: vault
        policies: ["ci-*"]
        max_ttl: 30m
        max_uses: 100
"""


def test_an_allow_on_a_parent_never_reaches_its_children(running: Running) -> None:
    env, a, b = running.env, running.a.port, running.b.port
    env.write_policy(delegating_policy(a, b))
    task = env.write_task(PARENT_TASK.replace("credentials:", f'network:\n  allow: ["127.0.0.1:{a}"]\ncredentials:'))
    write_children(
        running.workspace,
        {
            "later": child(network={"allow": [f"127.0.0.1:{b}"]}),
            "covered": child(network={"allow": [f"127.0.0.1:{a}"]}),
        },
    )
    os.chown(running.workspace, 1000, 1000)
    process = broker_process(
        env, "exec", "--task", str(task), "--workspace", str(running.workspace), "--", "sh", "-c", ASK
    )
    try:
        assert running.wait("before") == "ok"
        parent = running.session()
        allowed = env.run_process("session", "allow", "--session", parent, f"127.0.0.1:{b}")
        assert allowed.code == 0, allowed.stderr
        running.go("go1")
        assert running.wait("asked") == "later=403 covered=201"
        later = json.loads((running.workspace / "later.out").read_text())
        assert later["exit_code"] == 3 and "network.allow[0]" in later["error"], later
        covered = json.loads((running.workspace / "covered.out").read_text())
        assert covered["parent"] == parent
        refused = env.run_process("session", "allow", "--session", covered["session"], f"127.0.0.1:{b}")
        assert refused.code == 2 and f"is a child of {parent}" in refused.stderr, refused.stderr
        running.go("go2")
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    allowed_events = [r for r in env.log_records() if r["event"] == "session.allowed"]
    assert [r["session"] for r in allowed_events] == [parent]


def test_an_allow_under_a_rule_that_asks_for_an_approval_is_refused(running: Running) -> None:
    env, a, b = running.env, running.a.port, running.b.port
    task = env.write_task(task_text(a))
    wait = "touch /workspace/before; while [ ! -e /workspace/go1 ]; do sleep 0.05; done"
    process = broker_process(
        env, "exec", "--task", str(task), "--workspace", str(running.workspace), "--", "sh", "-c", wait
    )
    try:
        running.wait("before")
        session = running.session()
        # The operator's rule now asks a person for each session: what was issued stays, nothing widens it.
        approval = "    approval:\n      approvers: [4242]\n      timeout: 15m\n    grants:"
        env.write_policy(policy(a, b).replace("    grants:", approval, 1))
        refused = env.run_process("session", "allow", "--session", session, f"127.0.0.1:{b}")
        assert refused.code == 3 and "asks for an approval" in refused.stderr, refused.stderr
        running.go("go1")
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert not any(r["event"] == "session.allowed" for r in env.log_records())
