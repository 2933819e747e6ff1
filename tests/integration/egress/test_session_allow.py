"""``broker session allow | disallow``: a running exec's allow-list changed from outside, at once, policy-checked.

The command in bubblewrap reaches two plain-HTTP upstreams on loopback
through its proxy: the manifest allows one (``A``), the rule's network
covers both. The test steps it through: B refused; ``session allow B``;
B reached; ``session disallow A``; A refused, all in the same running
command. A destination the rule does not cover is denied (exit 3) and
changes nothing. Each change is a log record naming the destination, and
the log verifies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.crash import broker_process
from tests.fixtures.daemon import Daemon, daemon
from tests.fixtures.openbao import VAULT_TASK, OpenBao, add_vault_provider
from tests.fixtures.recording_api import RecordingAPI
from tests.fixtures.sandbox import sandbox_unavailable
from tests.integration.daemon.test_exec import _client_process, _workspace
from tests.integration.host.test_exec import workspace

__all__ = ["daemon"]  # fixture
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

INSIDE = r"""
export NO_PROXY= no_proxy=  # the upstreams are on 127.0.0.1 here; a real host is never exempt
code() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/x"; }
step() { echo "$2" > "/workspace/$1.tmp" && mv "/workspace/$1.tmp" "/workspace/$1"; }
wait_for() { while [ ! -e "/workspace/$1" ]; do sleep 0.05; done; }
step before "a=$(code $A) b=$(code $B)"
wait_for go1
step allowed "a=$(code $A) b=$(code $B)"
wait_for go2
step disallowed "a=$(code $A) b=$(code $B)"
"""


@dataclass
class Running:
    env: BrokerEnv
    a: RecordingAPI
    b: RecordingAPI
    workspace: Path

    def wait(self, name: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        path = self.workspace / name
        while not path.exists():
            assert time.monotonic() < deadline, f"the command never reached {name}"
            time.sleep(0.05)
        return path.read_text().strip()

    def go(self, name: str) -> None:
        (self.workspace / name).touch()

    def session(self) -> str:
        return str(next(r for r in self.env.log_records() if r["event"] == "session.issued")["session"])


@pytest.fixture
def running(tmp_path: Path, openbao: OpenBao) -> Iterator[Running]:
    a, b = RecordingAPI(None), RecordingAPI(None)
    env = make_env(tmp_path)
    add_vault_provider(env, openbao)
    env.write_policy(policy(a.port, b.port))
    try:
        yield Running(env, a, b, workspace(tmp_path))
    finally:
        env.cleanup()
        a.close()
        b.close()


def policy(a: int, b: int) -> str:
    return f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["127.0.0.1:{a}", "127.0.0.1:{b}"]
    grants:
      - provider: vault
        policies: ["ci-*"]
        max_uses: 100
"""


def task_text(a: int) -> str:
    return VAULT_TASK.replace("credentials:", f'network:\n  allow: ["127.0.0.1:{a}"]\ncredentials:')


def test_allow_and_disallow_change_a_running_session_at_once(running: Running) -> None:
    env, a, b = running.env, running.a.port, running.b.port
    task = env.write_task(task_text(a))
    script = f"export A={a} B={b}\n{INSIDE}"
    process = broker_process(
        env, "exec", "--task", str(task), "--workspace", str(running.workspace), "--", "sh", "-c", script
    )
    try:
        assert running.wait("before") == "a=200 b=403"
        session = running.session()
        # Beyond the rule's network: denied like an issue, nothing changes.
        denied = env.run_process("session", "allow", "--session", session, "127.0.0.1:9")
        assert denied.code == 3 and "127.0.0.1:9" in denied.stderr
        bad = env.run_process("session", "allow", "--session", session, "http://127.0.0.1:9")
        assert bad.code == 2 and bad.stderr.count("\n") == 1
        allowed = env.run_process("session", "allow", "--session", session, f"127.0.0.1:{b}")
        assert allowed.code == 0, allowed.stderr
        running.go("go1")
        assert running.wait("allowed") == "a=200 b=200"
        disallowed = env.run_process("session", "disallow", "--session", session, f"127.0.0.1:{a}", "--json")
        assert disallowed.code == 0, disallowed.stderr
        assert disallowed.json() == {"session": session, "destination": f"127.0.0.1:{a}", "allowed": False}
        running.go("go2")
        assert running.wait("disallowed") == "a=403 b=200"
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    changes = [
        (r["event"], r["destination"])
        for r in env.log_records()
        if "destination" in r and r["event"].startswith("session.")
    ]
    assert changes == [("session.allowed", f"127.0.0.1:{b}"), ("session.disallowed", f"127.0.0.1:{a}")]
    assert env.run("audit", "verify").code == 0


def test_a_session_without_a_running_proxy_is_refused_and_nothing_is_logged(running: Running) -> None:
    env = running.env
    issued = env.run("issue", "--task", str(env.write_task(VAULT_TASK)), "--json")
    assert issued.code == 0, issued.stderr
    session = issued.json()["session"]
    result = env.run_process("session", "allow", "--session", session, f"127.0.0.1:{running.b.port}")
    assert result.code == 2 and "runs no egress proxy" in result.stderr
    unknown = env.run_process("session", "allow", "--session", "s-000000000000", "127.0.0.1:1")
    assert unknown.code == 2 and "unknown session" in unknown.stderr
    assert not any(event.startswith("session.allowed") for event in env.events())


def test_through_the_daemon_the_same_commands_change_its_held_exec(daemon: Daemon) -> None:
    a, b = RecordingAPI(None), RecordingAPI(None)
    try:
        daemon.env.runtime_dir = daemon.shared / "run"  # as /run/broker: short enough for a socket's address
        daemon.env.write_config()
        daemon.env.write_policy(policy(a.port, b.port))
        daemon.start()
        running = Running(daemon.env, a, b, _workspace(daemon))
        task = daemon.task(task_text(a.port))
        script = f"export A={a.port} B={b.port}\n{INSIDE}"
        process = _client_process(
            daemon, "exec", "--task", str(task), "--workspace", str(running.workspace), "--", "sh", "-c", script
        )
        try:
            assert running.wait("before") == "a=200 b=403"
            session = running.session()
            denied = daemon.client("session", "allow", "--session", session, "127.0.0.1:9")
            assert denied.code == 3, denied.stderr
            allowed = daemon.client("session", "allow", "--session", session, f"127.0.0.1:{b.port}")
            assert (allowed.code, allowed.stdout) == (0, f"{session}: 127.0.0.1:{b.port} allowed\n"), allowed.stderr
            running.go("go1")
            assert running.wait("allowed") == "a=200 b=200"
            gone = daemon.client("session", "disallow", "--session", session, f"127.0.0.1:{a.port}", "--json")
            assert gone.code == 0 and gone.json()["allowed"] is False, gone.stderr
            running.go("go2")
            assert running.wait("disallowed") == "a=403 b=200"
            _, err = process.communicate(timeout=60)
            assert process.returncode == 0, err
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        events = [r["event"] for r in daemon.env.log_records() if "destination" in r and "session." in r["event"]]
        assert events == ["session.allowed", "session.disallowed"]
    finally:
        a.close()
        b.close()
