"""Through the daemon, ``session allow`` is decided for the session's own sandbox identity, never the daemon's.

A launcher of a uid with no account runs ``broker exec`` through the daemon
(its thin client, bubblewrap in a user namespace) with a manifest that
names no ``sandbox`` ids: the session is issued for the launcher's uid and
gid. It then asks, as that uid, for one more destination. The policy has
the launcher's rule (network ``A``, ``B``) and a rule for root sandboxes
(network ``A``, ``C``). The allow used to be decided for the daemon's own
ids (root): ``B``, which the session's rule covers, was denied, and ``C``,
which only the root rule lists, was put in the uid's running proxy. Now
``B`` is allowed and reached, ``C`` is refused naming the session's rule
(exit 3) and never reached.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.fixtures.daemon import SOCKET_GID, Daemon, daemon
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.recording_api import RecordingAPI
from tests.fixtures.sandbox import sandbox_unavailable

__all__ = ["daemon"]  # fixture
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

LAUNCHER_UID = 59123  # no account on the host; in the socket's group

POLICY = """
rules:
  - id: launchers
    tasks: ["fix-*"]
    requesters: ["uid:{uid}"]
    sandbox_uids: [{uid}]
    sandbox_gids: [{gid}]
    network: ["127.0.0.1:{a}", "127.0.0.1:{b}"]
    grants:
      - provider: vault
        policies: ["ci-*"]
        max_uses: 100
  - id: root-ci
    tasks: ["fix-*"]
    sandbox_uids: [0]
    sandbox_gids: [0]
    allow_root_sandbox: true
    network: ["127.0.0.1:{a}", "127.0.0.1:{c}"]
    grants:
      - provider: vault
        policies: ["ci-*"]
        max_uses: 100
"""

INSIDE = r"""
export NO_PROXY= no_proxy=  # the upstreams are on 127.0.0.1 here; a real host is never exempt
code() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/x"; }
step() { echo "$2" > "/workspace/$1.tmp" && mv "/workspace/$1.tmp" "/workspace/$1"; }
wait_for() { while [ ! -e "/workspace/$1" ]; do sleep 0.05; done; }
step before "b=$(code $B) c=$(code $C)"
wait_for go
step after "b=$(code $B) c=$(code $C)"
"""


def _wait(path: Path, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"the command never reached {path.name}"
        time.sleep(0.05)
    return path.read_text().strip()


def test_an_allow_through_the_daemon_is_decided_for_the_sessions_sandbox_not_root(
    daemon: Daemon, openbao: OpenBao
) -> None:
    a, b, c = RecordingAPI(None), RecordingAPI(None), RecordingAPI(None)
    try:
        daemon.env.runtime_dir = daemon.shared / "run"  # as /run/broker: a launcher may pass through to its sessions
        daemon.env.write_config()
        daemon.env.write_policy(POLICY.format(uid=LAUNCHER_UID, gid=SOCKET_GID, a=a.port, b=b.port, c=c.port))
        daemon.start()
        no_sandbox = VAULT_TASK.replace("sandbox: {uid: 1000, gid: 1000, mount_path: /run/secrets}\n", "")
        task = daemon.task(
            no_sandbox.replace("credentials:", f'network:\n  allow: ["127.0.0.1:{a.port}"]\ncredentials:')
        )
        workspace = daemon.shared / "workspace"
        workspace.mkdir()
        os.chown(workspace, LAUNCHER_UID, SOCKET_GID)
        script = f"export B={b.port} C={c.port}\n{INSIDE}"
        command = ("exec", "--task", str(task), "--workspace", str(workspace), "--", "sh", "-c", script)
        process = daemon.client_process(*command, uid=LAUNCHER_UID)
        try:
            assert _wait(workspace / "before") == "b=403 c=403"
            [issued] = [r for r in daemon.env.log_records() if r["event"] == "session.issued"]
            session = issued["session"]
            [state] = [s for s in daemon.env.run("status", "--all", "--json").json() if s["session"] == session]
            assert state["requester"] == f"uid:{LAUNCHER_UID}"
            root_only = daemon.client("session", "allow", "--session", session, f"127.0.0.1:{c.port}", uid=LAUNCHER_UID)
            assert root_only.code == 3, f"a root sandbox's destination was allowed: {root_only.stdout}"
            assert "rule launchers" in root_only.stderr and f"127.0.0.1:{c.port} is not in its network" in (
                root_only.stderr
            )
            allowed = daemon.client("session", "allow", "--session", session, f"127.0.0.1:{b.port}", uid=LAUNCHER_UID)
            assert allowed.code == 0, allowed.stderr
            (workspace / "go").touch()
            assert _wait(workspace / "after") == "b=200 c=403"
            _, err = process.communicate(timeout=60)
            assert process.returncode == 0, err
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        assert b.requests() == [("GET", "/x")]
        assert c.requests() == []
        allows = [(r["event"], r["destination"]) for r in daemon.env.log_records() if r["event"] == "session.allowed"]
        assert allows == [("session.allowed", f"127.0.0.1:{b.port}")]
    finally:
        for upstream in (a, b, c):
            upstream.close()
