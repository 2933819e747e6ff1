"""Every exit code the broker has (SPEC.md, "Exit codes"), each from a real cause.

Most codes are exercised where their cause is tested; this module holds the
ones no other test reached, and two guards over the code itself: every error
class carries a code of SPEC's table, and no code changes an error after it
was made (its message and its code are final when it is raised).

    0       every command that succeeds
    1       here: a failure nobody foresaw (stdout on a full device), one line; a traceback only with --debug
    2       test_cli (usage, a state_dir or store it cannot use), test_manifest, test_config, test_policy,
            test_fleet (a store it cannot reach); here: a runtime_dir not on tmpfs
    3       test_policy, test_aws_budget, test_daemon (through the thin client)
    4       test_lifecycle, test_cli; here: a rollback that leaves a credential pending says so
    5       test_revoke_isolation, test_lifecycle
    6       test_audit, test_audit_strict, test_audit_witness
    7       test_daemon, test_exec
    8       integration/daemon/test_approvals (issue --no-wait, and a wait that ends first)
    128+N   here: SIGTERM while the broker works (143); SIGINT (130, one line)
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.host import mounts
from broker.vocab import errors
from devstack.github_app import GitHubAppEmulator
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.crash import add_github, full_pipe, github_tokens, wait_for
from tests.fixtures.github import AppKeys

ROOT = Path(__file__).resolve().parents[3]
ASSIGNED_PER_ERROR = (errors.Interrupted, errors.DaemonReported)  # 128+N; the code the daemon answered with


def spec_codes() -> set[int]:
    table = (ROOT / "docs" / "SPEC.md").read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(code) for code in re.findall(r"^\| ([0-9]+) \|", table, re.MULTILINE)}


def error_classes() -> list[type[errors.BrokerError]]:
    return [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.BrokerError)]


def test_every_error_class_carries_a_code_of_the_spec_table() -> None:
    codes = spec_codes()
    assert codes == set(range(9))
    fixed = {c.__name__: c.exit_code for c in error_classes() if c not in ASSIGNED_PER_ERROR}
    assert {name: code for name, code in fixed.items() if code not in codes} == {}
    # the broker's own state is not the caller's input, though both exit 2
    assert not issubclass(errors.StoreError, errors.BadInput) and not issubclass(
        errors.RuntimeDirError, errors.BadInput
    )
    assert errors.DaemonReported("refused", 3).exit_code == 3 and errors.Interrupted(15).exit_code == 143


def test_no_code_changes_an_error_after_it_was_made() -> None:
    """An error's message and code are given when it is made: nothing appends to one on its way up."""
    changed = []
    for path in sorted([*(ROOT / "broker").rglob("*.py"), *(ROOT / "providers").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            else:
                continue
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr in ("message", "exit_code")
                    and not (isinstance(target.value, ast.Name) and target.value.id == "self")
                ):
                    changed.append(f"{path.relative_to(ROOT)}:{target.lineno}")
    assert changed == []


def test_a_failure_nobody_foresaw_is_one_line_and_exit_1(broker_env: BrokerEnv) -> None:
    """Standard output on a full device: no BrokerError says what that means for status, so it is exit 1."""
    command = [sys.executable, "-m", "broker.cli", "--config", str(broker_env.config_path)]
    with open("/dev/full", "w") as full:
        plain = subprocess.run([*command, "status", "--json"], stdout=full, stderr=subprocess.PIPE, text=True)
        debug = subprocess.run(
            [*command, "--debug", "status", "--json"], stdout=full, stderr=subprocess.PIPE, text=True
        )
    assert plain.returncode == 1, plain.stderr
    assert plain.stderr == (
        f"broker: error: internal error (OSError); please report it at {errors.REPORT_URL} (use --debug for details)\n"
    )
    assert debug.returncode == 1 and debug.stderr.startswith("Traceback (most recent call last):")
    assert debug.stderr.endswith(plain.stderr)


def test_a_runtime_dir_not_on_tmpfs_is_exit_2_and_mints_nothing(broker_env: BrokerEnv, tmp_path: Path) -> None:
    """SPEC's own example of exit 2: with mount_tmpfs = "never", a runtime_dir on a disk is refused."""
    on_disk = tmp_path / "on-disk-run"
    assert not mounts.is_tmpfs(tmp_path)  # the test's premise: a directory on a disk
    broker_env.runtime_dir = on_disk
    broker_env.settings["mount_tmpfs"] = "never"
    token = broker_env.write_secret("vault-token", "not-a-real-token")
    broker_env.add_provider("vault", {"type": "vault", "addr": "http://127.0.0.1:9", "token_file": str(token)})
    uid, gid = (1000, 1000) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    task = broker_env.write_task(
        f"version: 1\ntask: fix-1\nsandbox: {{uid: {uid}, gid: {gid}}}\n"
        "credentials:\n  - {name: kv, provider: vault, policies: [ci-read], num_uses: 5}\n"
    )
    result = broker_env.run("issue", "--task", str(task), "--json")
    assert result.code == 2, result.stderr
    assert result.stderr == (
        f"broker: error: runtime_dir {on_disk} is not on tmpfs and the broker cannot mount one;"
        " secrets would reach a disk\n"
    )
    assert result.stdout == ""
    assert broker_env.run("status", "--all", "--json").json() == []  # no session was even recorded


def blocked_on_a_full_pipe(args: list[str]) -> tuple[subprocess.Popen[str], int]:
    """``broker ARGS`` writing its output into a pipe nobody reads, once it is blocked there."""
    read_end, write_end = full_pipe()
    process = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", *args], stdout=write_end, stderr=subprocess.PIPE, text=True
    )
    os.close(write_end)
    wait_for(lambda: "pipe_write" in Path(f"/proc/{process.pid}/wchan").read_text())
    return process, read_end


def ended_by(signum: int, env: BrokerEnv) -> tuple[int, str]:
    """The exit code and stderr of ``broker status --json`` given ``signum`` while it works (blocked printing)."""
    process, read_end = blocked_on_a_full_pipe(["--config", str(env.config_path), "status", "--json"])
    try:
        process.send_signal(signum)
        os.set_blocking(read_end, False)
        deadline = time.monotonic() + 30
        while process.poll() is None and time.monotonic() < deadline:  # let what it still flushes at exit out
            with contextlib.suppress(BlockingIOError):
                os.read(read_end, 65536)
            time.sleep(0.02)
        stderr = process.stderr.read() if process.stderr else ""
    finally:
        process.kill()
        process.wait()
        os.close(read_end)
    return process.returncode, stderr


def test_sigterm_ends_the_broker_with_143_and_one_line(broker_env: BrokerEnv) -> None:
    code, stderr = ended_by(signal.SIGTERM, broker_env)
    assert code == 128 + signal.SIGTERM, stderr
    assert stderr == "broker: error: interrupted by signal 15; what was minted has been rolled back\n"


def test_sigint_ends_the_broker_with_130(broker_env: BrokerEnv) -> None:
    code, stderr = ended_by(signal.SIGINT, broker_env)
    assert code == 130, stderr


def test_sigint_says_so_in_one_line(broker_env: BrokerEnv) -> None:
    _, stderr = ended_by(signal.SIGINT, broker_env)
    assert stderr == "broker: error: interrupted; what was minted has been rolled back\n"


TWO_TOKENS = """
version: 1
task: fix-build-9
ttl: 20m
sandbox: {uid: UID, gid: GID, mount_path: /run/secrets}
credentials:
  - {name: repo, provider: github, repositories: [octo-org/widgets], permissions: {contents: write}}
  - {name: again, provider: github, repositories: [octo-org/widgets], permissions: {contents: write}}
"""


@pytest.mark.server
def test_a_provider_failure_whose_rollback_leaves_a_credential_pending_says_which(
    broker_env: BrokerEnv, github_emulator: GitHubAppEmulator, github_app_keys: AppKeys
) -> None:
    """Exit 4 with the provider's failure and, in the same message, the credential the rollback could not revoke."""
    add_github(broker_env, github_emulator, github_app_keys)
    uid, gid = (1000, 1000) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    task = broker_env.write_task(TWO_TOKENS.replace("UID", str(uid)).replace("GID", str(gid)))
    github_emulator.force("create_token", 422)  # one of the two mints is refused at once, the other succeeds
    github_emulator.fail_revocations = True  # and the rollback cannot revoke it
    result = broker_env.run("issue", "--task", str(task), "--json")
    assert result.code == 4, result.stderr
    [(token, state)] = github_tokens(github_emulator).items()
    assert state == "valid"
    [session] = broker_env.run("status", "--all", "--json").json()
    [pending] = [c["name"] for c in session["credentials"] if c["state"] == "pending"]
    assert re.fullmatch(
        rf"broker: error: .*422.* \(rollback left {pending} pending for broker sweep\)\n", result.stderr
    ), result.stderr
    assert result.stdout == "" and token not in result.stderr
    github_emulator.fail_revocations = False
    assert broker_env.run("sweep", "--json").code == 0
    assert github_emulator.token_state(token) == "revoked"
