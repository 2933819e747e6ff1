"""Resource limits for real: ``sandbox.limits`` (and a rule's ``limits``) enforced on a real exec, and reported.

A fork bomb gets EAGAIN at the process limit, a memory hog is ended by the OOM killer at the memory limit, and
``broker exec`` exits 137 with one line naming the limit; in bubblewrap through the session's own cgroup, in a
podman container through the engine's flags and the session's cgroup as its parent. The cgroup is gone after.
"""

from __future__ import annotations

import pytest

from tests.fixtures.brokerenv import DEFAULT_POLICY, BrokerEnv
from tests.fixtures.containers import (
    PODMAN_OPTIONS,
    podman_image,
    podman_unavailable,
    python_library_bind,
    session_cgroups,
)
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.sandbox import sandbox_unavailable

__all__ = ["podman_image"]  # fixture
pytestmark = [pytest.mark.server, pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable()))]
needs_podman = pytest.mark.skipif(bool(podman_unavailable()), reason=str(podman_unavailable()))

#: Forks until the kernel refuses (printing the errno), lets its children go, then allocates until it is killed.
HOG = r"""
import os, signal, time
children = []
try:
    while len(children) < 1000:
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children.append(pid)
except OSError as error:
    print("fork refused", error.errno, flush=True)
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print("allocating", flush=True)
hoard = []
while True:
    hoard.append(bytearray(1 << 20))
"""
#: Forks until the kernel refuses; the children go with the sandbox.
FORKS = """
import os, time
try:
    while True:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
except OSError as error:
    print("fork refused", error.errno)
"""
LIMITED = "sandbox: {uid: 1000, gid: 1000, mount_path: /run/secrets, limits: {memory: 64MiB, pids: 24}}"


def limited_task(env: BrokerEnv, sandbox: str = LIMITED) -> str:
    return str(env.write_task(VAULT_TASK.replace("sandbox: {uid: 1000, gid: 1000, mount_path: /run/secrets}", sandbox)))


def session_of(env: BrokerEnv) -> str:
    return str(next(r for r in env.log_records() if r["event"] == "session.issued")["session"])


def test_bubblewrap_a_fork_bomb_gets_eagain_and_a_memory_hog_is_killed_and_both_are_reported(
    vault_env: BrokerEnv, openbao: OpenBao
) -> None:
    result = vault_env.run_process("exec", "--task", limited_task(vault_env), "--", "/usr/bin/python3", "-c", HOG)
    assert result.code == 137, result.stdout + result.stderr
    assert "fork refused 11" in result.stdout.splitlines()  # EAGAIN
    assert "allocating" in result.stdout.splitlines()
    lines = result.stderr.splitlines()
    assert "broker: the command was killed: it went past sandbox.limits.memory (64MiB)" in lines
    assert "broker: a process of the command could not fork: it reached sandbox.limits.pids (24)" in lines
    assert session_cgroups(session_of(vault_env)) == []
    assert vault_env.events()[-3:] == ["credential.revoked", "session.revoked", "checkpoint"]


@needs_podman
def test_podman_a_fork_bomb_gets_eagain_and_a_memory_hog_is_killed_and_reported(
    vault_env: BrokerEnv, openbao: OpenBao, podman_image: str
) -> None:
    vault_env.tables["sandbox.podman"] = dict(PODMAN_OPTIONS)
    vault_env.write_config()
    args = ["exec", "--task", limited_task(vault_env), "--sandbox", "podman", "--image", podman_image]
    args += ["--ro-bind", python_library_bind(), "--", "python3", "-c", HOG]
    result = vault_env.run_process(*args)
    assert result.code == 137, result.stdout + result.stderr
    assert "fork refused 11" in result.stdout.splitlines()  # EAGAIN, at the engine's --pids-limit
    assert "broker: the command was killed: it went past sandbox.limits.memory (64MiB)" in result.stderr.splitlines()
    assert session_cgroups(session_of(vault_env)) == []


def test_a_rules_limits_apply_when_the_manifest_has_none_and_cap_it_when_it_has(
    vault_env: BrokerEnv, openbao: OpenBao
) -> None:
    vault_env.write_policy(DEFAULT_POLICY.replace("    max_ttl: 1h\n", "    max_ttl: 1h\n    limits: {pids: 16}\n", 1))
    task = limited_task(vault_env, "sandbox: {uid: 1000, gid: 1000}")
    result = vault_env.run_process("exec", "--task", task, "--", "/usr/bin/python3", "-c", FORKS)
    assert result.code == 0, result.stderr
    assert "fork refused 11" in result.stdout
    assert "broker: a process of the command could not fork: it reached sandbox.limits.pids (16)" in result.stderr
    above = limited_task(vault_env, "sandbox: {uid: 1000, gid: 1000, limits: {pids: 64}}")
    denied = vault_env.run_process("exec", "--task", above, "--", "true")
    assert denied.code == 3
    assert "sandbox.limits.pids: 64 is above limits.pids of rule agents (16)" in denied.stderr
    assert denied.stderr.count("\n") == 1


def test_limits_without_a_sandbox_to_enforce_them_are_refused_before_anything_is_minted(
    vault_env: BrokerEnv, openbao: OpenBao
) -> None:
    result = vault_env.run_process("exec", "--task", limited_task(vault_env), "--sandbox", "none", "--", "true")
    assert result.code == 2
    assert result.stderr == (
        "broker: error: sandbox.limits need a sandbox to enforce them: --sandbox bwrap, podman or docker\n"
    )
    assert [r["event"] for r in vault_env.log_records() if r["event"] != "checkpoint"] == []
