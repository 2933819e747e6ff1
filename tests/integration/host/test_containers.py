"""``broker exec --sandbox podman``: a real command in a real rootful podman container, with only its credentials.

The image is one this module builds from the host's binaries (``tests.fixtures.containers``); the session is a
real one of OpenBao's. Each guarantee of bubblewrap exec that a container can give is checked the way
``tests/integration/host/test_exec.py`` checks it: who runs, what it sees, its status, revocation at the end, the
stop signals, an outside revoke; and that nothing of the run is left (container, cgroup).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.host.containers.engine import engine_path
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.containers import PODMAN_OPTIONS, containers_named, podman_image, podman_unavailable
from tests.fixtures.crash import broker_process, wait_for_issue
from tests.fixtures.openbao import VAULT_TASK, OpenBao

__all__ = ["podman_image"]  # fixture
pytestmark = [pytest.mark.server, pytest.mark.skipif(bool(podman_unavailable()), reason=str(podman_unavailable()))]

INSIDE = r"""
id -u; id -g
grep -E '^(CapEff|CapBnd|NoNewPrivs|Groups):' /proc/self/status
tr '\0' '\n' < /proc/self/environ
test -r /run/secrets/kv/token && echo token-readable
touch /run/secrets/x 2>/dev/null || echo secrets-read-only
touch /scratch/x 2>/dev/null || echo root-read-only
touch /workspace/made && echo workspace-writable
exit 7
"""


@pytest.fixture
def podman_env(vault_env: BrokerEnv) -> BrokerEnv:
    vault_env.tables["sandbox.podman"] = dict(PODMAN_OPTIONS)
    vault_env.write_config()
    return vault_env


def issued_accessor(env: BrokerEnv) -> str:
    return str(next(r for r in env.log_records() if r["event"] == "credential.issued")["reference"]["accessor"])


def session_of(env: BrokerEnv) -> str:
    return str(next(r for r in env.log_records() if r["event"] == "session.issued")["session"])


def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    os.chown(path, 1000, 1000)
    return path


def podman_exec(env: BrokerEnv, image: str, *command: str, extra: tuple[str, ...] = ()) -> list[str]:
    task = str(env.write_task(VAULT_TASK))
    return ["exec", "--task", task, "--sandbox", "podman", "--image", image, *extra, "--", *command]


def test_the_command_runs_as_the_sandbox_user_with_no_capabilities_and_only_its_session(
    podman_env: BrokerEnv, openbao: OpenBao, podman_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BROKER_OWN_SECRET", "canary-7c1e9a")
    args = podman_exec(podman_env, podman_image, "sh", "-c", INSIDE, extra=("--workspace", str(workspace(tmp_path))))
    result = podman_env.run_process(*args)
    assert result.code == 7, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["1000", "1000"]
    assert "CapEff:\t0000000000000000" in lines and "CapBnd:\t0000000000000000" in lines
    assert "NoNewPrivs:\t1" in lines
    groups = next(line for line in lines if line.startswith("Groups:")).split()[1:]
    assert set(groups) <= {"1000"}  # its own group at most
    names = {line.split("=", 1)[0] for line in lines if "=" in line}
    # The engine adds HOSTNAME and container=podman of its own; nothing of the launcher's environment passes.
    assert names <= {"PATH", "HOME", "LANG", "TERM", "VAULT_ADDR", "BROKER_SESSION", "HOSTNAME", "container"}
    assert {"PATH", "HOME", "VAULT_ADDR", "BROKER_SESSION"} <= names
    assert "canary-7c1e9a" not in result.stdout
    assert {"token-readable", "secrets-read-only", "root-read-only", "workspace-writable"} <= set(lines)
    assert (tmp_path / "workspace" / "made").exists()
    assert not openbao.accessor_exists(issued_accessor(podman_env))
    assert podman_env.session_dirs() == []
    assert containers_named(f"broker-{session_of(podman_env)}") == []
    assert podman_env.events()[-3:] == ["credential.revoked", "session.revoked", "checkpoint"]


def test_a_manifest_may_ask_for_a_writable_root(podman_env: BrokerEnv, openbao: OpenBao, podman_image: str) -> None:
    writable = VAULT_TASK.replace("mount_path: /run/secrets}", "mount_path: /run/secrets, read_only_root: false}")
    task = str(podman_env.write_task(writable))
    args = ["exec", "--task", task, "--sandbox", "podman", "--image", podman_image]
    result = podman_env.run_process(*args, "--", "sh", "-c", "touch /scratch/made && echo wrote")
    assert result.code == 0 and result.stdout.strip() == "wrote", result.stderr


def test_sigterm_to_the_broker_reaches_the_containers_command_and_revokes(
    podman_env: BrokerEnv, openbao: OpenBao, podman_image: str
) -> None:
    process = broker_process(podman_env, *podman_exec(podman_env, podman_image, "sleep", "60"))
    wait_for_issue(podman_env)
    time.sleep(1.0)  # the container runs
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert not openbao.accessor_exists(issued_accessor(podman_env))
    assert containers_named(f"broker-{session_of(podman_env)}") == []


def test_an_outside_revoke_stops_the_container_and_removes_it(
    podman_env: BrokerEnv, openbao: OpenBao, podman_image: str
) -> None:
    # sh traps SIGTERM away: only the SIGKILL after the grace period, and the container's removal, end it.
    script = "trap '' TERM; while :; do sleep 1; done"
    process = broker_process(podman_env, *podman_exec(podman_env, podman_image, "sh", "-c", script))
    wait_for_issue(podman_env)
    session = session_of(podman_env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not containers_named(f"broker-{session}"):
        time.sleep(0.1)
    revoked = podman_env.run_process("revoke", "--session", session)
    assert revoked.code == 0, revoked.stderr
    process.communicate(timeout=60)
    assert process.returncode != 0
    assert containers_named(f"broker-{session}") == []
    assert not openbao.accessor_exists(issued_accessor(podman_env))


def test_a_killed_broker_leaves_a_container_that_sweep_removes_as_it_revokes(
    podman_env: BrokerEnv, openbao: OpenBao, podman_image: str
) -> None:
    process = broker_process(podman_env, *podman_exec(podman_env, podman_image, "sleep", "300"))
    wait_for_issue(podman_env)
    session = session_of(podman_env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not containers_named(f"broker-{session}"):
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    assert containers_named(f"broker-{session}") == [f"broker-{session}"]  # a container outlives its broker
    swept = podman_env.run("sweep", "--json")
    assert swept.code == 0 and swept.json()["recovered"] == [session]
    assert containers_named(f"broker-{session}") == []
    assert not openbao.accessor_exists(issued_accessor(podman_env))


def test_a_missing_image_is_a_clear_error_before_anything_is_minted(podman_env: BrokerEnv) -> None:
    result = podman_env.run_process(*podman_exec(podman_env, "localhost/no-such-image:0", "true"))
    assert result.code == 2
    assert result.stderr.startswith("broker: error: podman has no image 'localhost/no-such-image:0';")
    assert "exec never pulls" in result.stderr and result.stderr.count("\n") == 1
    assert podman_env.log_records() == []


def test_an_engine_that_is_not_installed_is_a_clear_error_before_anything_is_minted(
    podman_env: BrokerEnv, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    task = str(podman_env.write_task(VAULT_TASK))
    command = [sys.executable, "-m", "broker.cli", "--config", str(podman_env.config_path), "exec", "--task", task]
    command += ["--sandbox", "podman", "--image", "localhost/any:1", "--", "true"]
    result = subprocess.run(command, capture_output=True, text=True, env={"PATH": str(bin_dir)}, check=False)
    assert result.returncode == 2
    expected = "broker: error: podman is not installed (apt-get install podman runc), or use --sandbox bwrap\n"
    assert result.stderr == expected
    assert podman_env.log_records() == []


@pytest.mark.skipif(engine_path("docker") is None, reason="the docker CLI is not installed")
def test_a_docker_engine_that_does_not_answer_is_a_clear_error_before_anything_is_minted(podman_env: BrokerEnv) -> None:
    """This host has docker's CLI and no docker engine: what a launcher sees when dockerd is down."""
    if subprocess.run(["docker", "version"], capture_output=True, check=False, timeout=30).returncode == 0:
        pytest.skip("a docker engine answers here")
    task = str(podman_env.write_task(VAULT_TASK))
    result = podman_env.run_process("exec", "--task", task, "--sandbox", "docker", "--image", "any:1", "--", "true")
    assert result.code == 2
    assert result.stderr.startswith("broker: error: docker does not answer (")
    assert result.stderr.endswith("; start its engine\n") and result.stderr.count("\n") == 1
    assert podman_env.log_records() == []


def test_an_unknown_engine_is_refused_by_the_command_line(podman_env: BrokerEnv) -> None:
    task = str(podman_env.write_task(VAULT_TASK))
    result = podman_env.run_process("exec", "--task", task, "--sandbox", "lxc", "--image", "x", "--", "true")
    assert result.code == 2 and "lxc" in result.stderr and result.stderr.count("\n") == 1
    assert podman_env.log_records() == []
