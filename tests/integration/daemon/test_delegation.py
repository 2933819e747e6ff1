"""Delegation through ``broker serve``: the daemon holds the exec session and serves its ``broker.sock``.

The client runs the sandbox (as root: the sandbox user under setpriv), the
daemon binds the socket into the session directory and answers the sandbox's
child requests; revoking the parent through the daemon (from another
terminal) revokes its children first, and the socket goes with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.daemon import WAIT, Daemon, _wait_for, daemon
from tests.fixtures.delegating import DELEGATE_POLICY, PARENT_TASK, child, write_children
from tests.fixtures.openbao import OpenBao
from tests.fixtures.sandbox import sandbox_unavailable

__all__ = ["daemon"]  # fixtures
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

INSIDE = r"""
curl -sS --unix-socket "$BROKER_SOCKET" -o /workspace/narrow.out -w "narrow %{http_code}\n" -X POST \
     --data-binary @/workspace/narrow.json http://broker/v1/sessions
curl -sS --unix-socket "$BROKER_SOCKET" -o /workspace/wide.out -w "wide %{http_code}\n" -X POST \
     --data-binary @/workspace/wide.json http://broker/v1/sessions
curl -sS --unix-socket "$BROKER_SOCKET" -o /workspace/status.out -w "status %{http_code}\n" \
     "http://broker/v1/sessions?all=1"
curl -sS --unix-socket "$BROKER_SOCKET" -o /workspace/health.out -w "health %{http_code}\n" http://broker/v1/health
curl -sS --unix-socket "$BROKER_SOCKET" -o /workspace/exec.out -w "exec %{http_code}\n" -X POST -d '{}' \
     http://broker/v1/exec
touch /workspace/asked
exec sleep 600
"""


def _workspace(daemon: Daemon) -> Path:
    path = daemon.shared / "workspace"
    path.mkdir()
    os.chown(path, 1000, 1000)
    return path


def _states(daemon: Daemon) -> dict[str, str]:
    return {item["session"]: item["state"] for item in daemon.env.run("status", "--all", "--json").json()}


def test_the_daemon_serves_a_held_sessions_socket_and_revoking_the_parent_revokes_its_children(
    daemon: Daemon, openbao: OpenBao
) -> None:
    daemon.env.runtime_dir = daemon.shared / "run"
    daemon.env.write_config()
    daemon.env.write_policy(DELEGATE_POLICY.format(depth=1))
    daemon.start()
    workspace = _workspace(daemon)
    write_children(workspace, {"narrow": child(), "wide": child(credential={"policies": ["ci-admin"]})})
    task = daemon.task(PARENT_TASK)
    environment = {"PATH": os.environ["PATH"], "BROKER_SOCKET": str(daemon.socket), "HOME": "/"}
    client = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker",
            "exec",
            "--task",
            str(task),
            "--workspace",
            str(workspace),
            "--",
            "sh",
            "-c",
            INSIDE,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
        cwd="/",
    )
    try:
        _wait_for(lambda: (workspace / "asked").exists() or client.poll() is not None, "the sandbox's requests")
        assert client.poll() is None, client.communicate()
        narrow = json.loads((workspace / "narrow.out").read_text())
        parent = narrow["parent"]
        assert _states(daemon) == {parent: "active", narrow["session"]: "active"}
        wide = json.loads((workspace / "wide.out").read_text())
        assert wide["exit_code"] == 3 and "credentials[0].policies[0]: ci-admin" in wide["error"]
        assert [s["session"] for s in json.loads((workspace / "status.out").read_text())] == [narrow["session"]]
        assert json.loads((workspace / "health.out").read_text())["session"] == parent
        assert json.loads((workspace / "exec.out").read_text())["exit_code"] == 2  # the daemon's exec: not here
        revoked = daemon.client("revoke", "--session", parent)  # from another terminal, through the daemon
        assert revoked.code == 0, revoked.stderr
        out, err = client.communicate(timeout=WAIT)
    finally:
        if client.poll() is None:
            client.kill()
    assert "narrow 201" in out and "wide 403" in out and "exec 404" in out, out + err
    assert _states(daemon) == {parent: "revoked", narrow["session"]: "revoked"}
    sessions = [r["session"] for r in daemon.env.log_records() if r["event"] == "session.revoked"]
    assert sessions == [narrow["session"], parent]
    accessors = [r["reference"]["accessor"] for r in daemon.env.log_records() if r["event"] == "credential.issued"]
    assert len(accessors) == 2 and not any(openbao.accessor_exists(a) for a in accessors)
    deadline = time.monotonic() + WAIT
    while list(daemon.env.runtime_dir.glob("s-*/broker.sock")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(daemon.env.runtime_dir.glob("s-*/broker.sock")) == []
    assert daemon.env.run("audit", "verify").code == 0
