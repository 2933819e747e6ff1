"""What a sandbox learns of the host from its own ``/proc/self/mountinfo``, read from inside a real bwrap sandbox.

Every bind mount shows its source as a path within the source's filesystem
(the fourth field). The egress proxy's socket is bound at ``/run/broker/
proxy.sock`` from the broker's own tmpfs, so it shows ``/<session>/proxy.sock``
and nothing of the host (before the fix: ``/tmp/broker-egress-XXXX/
proxy.sock`` at ``/run/.broker-egress.sock``); the session's directory is a
tmpfs of its own (``/``). What stays visible is what the launcher chose to
bind: the workspace's host path, and the ``--ro-bind`` paths, which are the
same inside.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.daemon import Daemon, daemon
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.sandbox import sandbox_unavailable, vault_egress_policy

__all__ = ["daemon"]
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

TASK = VAULT_TASK.replace("credentials:", 'network:\n  allow: ["127.0.0.1:9"]\ncredentials:')
READ = "cat /proc/self/mountinfo"


def _mounts(mountinfo: str) -> dict[str, str]:
    """Mount point -> the path of its source within its filesystem."""
    return {fields[4]: fields[3] for fields in (line.split(" ") for line in mountinfo.splitlines())}


def _session(env: BrokerEnv) -> str:
    [session] = {r["session"] for r in env.log_records() if r["event"] == "session.issued"}
    return str(session)


def _names_nothing_of(mountinfo: str, *host_paths: Path) -> None:
    for path in host_paths:
        for part in {str(path), *(p for p in path.parts if len(p) > 6)}:  # the path and its telling names
            assert part not in mountinfo, f"{part!r} is visible in the sandbox's mountinfo"
    assert "broker-egress" not in mountinfo


@pytest.mark.skipif(os.geteuid() != 0, reason="the broker mounts its tmpfs as root")
def test_a_direct_exec_sandbox_sees_the_proxy_socket_and_secrets_as_the_brokers_own_tmpfs(
    vault_env: BrokerEnv, openbao: OpenBao, tmp_path: Path
) -> None:
    vault_env.write_policy(vault_egress_policy(9))
    workspace = tmp_path / "workspace-of-the-launcher"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    task = vault_env.write_task(TASK)
    result = vault_env.run_process("exec", "--task", str(task), "--workspace", str(workspace), "--", "sh", "-c", READ)
    assert result.code == 0, result.stderr
    mounts = _mounts(result.stdout)
    assert mounts["/run/broker/proxy.sock"] == f"/{_session(vault_env)}/proxy.sock"
    assert mounts["/run/secrets"] == "/"
    assert mounts["/usr"] == "/usr"
    # What stays visible: the workspace the launcher chose, as a path within its filesystem.
    assert mounts["/workspace"].endswith("/workspace-of-the-launcher")
    elsewhere = "\n".join(line for line in result.stdout.splitlines() if " /workspace " not in line)
    _names_nothing_of(elsewhere, vault_env.runtime_dir, vault_env.state_dir, vault_env.root)


def test_a_launcher_that_is_not_root_binds_the_daemons_socket_that_names_nothing_of_the_host(
    daemon: Daemon, openbao: OpenBao
) -> None:
    daemon.env.runtime_dir = daemon.shared / "run"  # as /run/broker: a launcher may pass through to its sessions
    daemon.env.write_config()
    daemon.env.write_policy(vault_egress_policy(9))
    daemon.start()
    result = daemon.client("exec", "--task", str(daemon.task(TASK)), "--", "sh", "-c", READ, uid=1000)
    assert result.code == 0, result.stderr
    mounts = _mounts(result.stdout)
    assert mounts["/run/broker/proxy.sock"] == f"/{_session(daemon.env)}/proxy.sock"
    assert mounts["/run/secrets"] == "/"
    _names_nothing_of(result.stdout, daemon.env.runtime_dir, daemon.env.state_dir, daemon.env.root)
