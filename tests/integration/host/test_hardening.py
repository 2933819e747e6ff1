"""The broker process that holds a session's secrets: no core dump and not dumpable, its memory locked (and,
when it may not lock, it still works and says why).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.crash import broker_process, wait_for_issue
from tests.fixtures.openbao import VAULT_TASK

pytestmark = pytest.mark.server


def test_the_broker_process_cannot_dump_core(vault_env: BrokerEnv) -> None:
    """While exec runs, the broker holds secrets: no core file, no same-uid ptrace (non-dumpable)."""
    process = broker_process(
        vault_env, "exec", "--task", str(vault_env.write_task(VAULT_TASK)), "--sandbox", "none", "--", "sleep", "5"
    )
    try:
        wait_for_issue(vault_env)
        limits = Path(f"/proc/{process.pid}/limits").read_text()
        core = next(line for line in limits.splitlines() if line.startswith("Max core file size"))
        assert core.split()[4:6] == ["0", "0"], core
        if os.geteuid() != 0:
            assert Path(f"/proc/{process.pid}/environ").stat().st_uid == 0  # non-dumpable: /proc entries are root's
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)


def status_field(pid: int, name: str) -> str:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return next(line.split(":", 1)[1].strip() for line in lines if line.startswith(f"{name}:"))


@pytest.mark.skipif(os.geteuid() != 0, reason="locking all memory needs CAP_IPC_LOCK (root)")
def test_the_broker_holding_a_session_has_its_memory_locked(vault_env: BrokerEnv) -> None:
    """Pages of the broker that holds secrets never reach swap: mlockall, seen as VmLck of the live process."""
    process = broker_process(
        vault_env, "exec", "--task", str(vault_env.write_task(VAULT_TASK)), "--sandbox", "none", "--", "sleep", "5"
    )
    try:
        wait_for_issue(vault_env)
        locked_kib = int(status_field(process.pid, "VmLck").split()[0])
        assert locked_kib > 1024, locked_kib
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)


@pytest.mark.skipif(not shutil.which("prlimit") or os.geteuid() != 0, reason="needs root and prlimit (util-linux)")
def test_a_broker_that_may_not_lock_memory_still_works_and_says_so(vault_env: BrokerEnv) -> None:
    """Without CAP_IPC_LOCK and with a small RLIMIT_MEMLOCK the broker runs unlocked (locking everything would
    make its allocations fail past the limit) and ``--verbose`` says why."""
    limited = ["setpriv", "--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock", "prlimit", "--memlock=65536:65536"]
    command = [sys.executable, "-m", "broker.cli", "--config", str(vault_env.config_path), "--verbose"]
    script = 'grep -E "^(VmLck|CapEff)" /proc/$PPID/status'  # the broker is the parent of the command
    result = subprocess.run(
        [*limited, *command, "exec", "--task", str(vault_env.write_task(VAULT_TASK)), "--sandbox", "none"]
        + ["--", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "broker: info: memory not locked: secrets may reach swap" in result.stderr
    assert "no CAP_IPC_LOCK and RLIMIT_MEMLOCK is 64 KiB" in result.stderr
    fields = dict(line.split(":", 1) for line in result.stdout.splitlines())
    assert fields["VmLck"].split() == ["0", "kB"], result.stdout
    assert int(fields["CapEff"], 16) >> 14 & 1 == 0  # really without CAP_IPC_LOCK


def test_harden_process_marks_the_process_non_dumpable() -> None:
    script = (
        "from broker.host.process_hardening import harden_process, is_dumpable; harden_process(); print(is_dumpable())"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
