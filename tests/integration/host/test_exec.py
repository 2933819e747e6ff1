"""``broker exec``: a real command in a real bubblewrap sandbox, with only its credentials, revoked after."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devstack.github_app import GitHubAppEmulator
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.crash import broker_process, wait_for_issue
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.sandbox import python_runtime, sandbox_unavailable

pytestmark = pytest.mark.server
BOUNDARY_CHECK = Path(__file__).resolve().parents[3] / "scripts" / "boundary-check"
needs_sandbox = pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable()))


def issued_accessor(env: BrokerEnv) -> str:
    return str(next(r for r in env.log_records() if r["event"] == "credential.issued")["reference"]["accessor"])


def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    os.chown(path, 1000, 1000)
    return path


@needs_sandbox
def test_boundary_check_passes_inside_the_sandbox_and_the_token_is_revoked_after(
    vault_env: BrokerEnv, openbao: OpenBao, tmp_path: Path
) -> None:
    python, prefix = python_runtime()
    task = vault_env.write_task(VAULT_TASK)
    result = vault_env.run_process(
        "exec",
        "--task",
        str(task),
        "--sandbox",
        "bwrap",
        "--network",
        "none",
        "--workspace",
        str(workspace(tmp_path)),
        "--ro-bind",
        prefix,
        "--ro-bind",
        str(BOUNDARY_CHECK),
        "--",
        python,
        str(BOUNDARY_CHECK),
        "--expect-no-network",
        "--forbid",
        str(vault_env.root),
        "--forbid",
        str(vault_env.state_dir),
        "--forbid",
        str(vault_env.runtime_dir),
    )
    lines = result.stdout.splitlines()
    assert result.code == 0, result.stdout + result.stderr
    assert lines and all(line.startswith(("PASS ", "SKIP ")) for line in lines), result.stdout
    assert any(line.startswith("PASS credentials-read-only") for line in lines)
    assert any(line.startswith("PASS syscalls-refused") and "io_uring_setup EPERM" in line for line in lines)
    assert any(line.startswith("PASS socket-families") and "vsock EAFNOSUPPORT" in line for line in lines)
    assert not openbao.accessor_exists(issued_accessor(vault_env))
    assert vault_env.session_dirs() == []
    assert vault_env.events()[-3:] == ["credential.revoked", "session.revoked", "checkpoint"]


def test_the_command_gets_a_clean_environment_and_its_exit_status(
    vault_env: BrokerEnv, openbao: OpenBao, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("BROKER_OWN_SECRET", "canary-5d1f3e")
    task = vault_env.write_task(
        VAULT_TASK.replace("mount_path: /run/secrets}", "mount_path: /run/secrets, env: {CI: 'true'}}")
    )
    result = vault_env.run_process(
        "exec",
        "--task",
        str(task),
        "--sandbox",
        "none",
        "--workspace",
        str(workspace(tmp_path)),
        "--",
        "sh",
        "-c",
        "tr '\\0' '\\n' < /proc/self/environ; id -u; cat \"$(dirname \"$VAULT_ADDR\")\" 2>/dev/null; exit 7",
    )
    assert result.code == 7, result.stderr
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines() if "=" in line}
    assert names <= {"PATH", "HOME", "LANG", "TERM", "CI", "VAULT_ADDR", "BROKER_SESSION", "PWD", "SHLVL", "_"}
    assert "canary-5d1f3e" not in result.stdout
    if os.geteuid() == 0:
        assert "1000" in result.stdout.splitlines()  # the host command never runs as root
    assert not openbao.accessor_exists(issued_accessor(vault_env))


def test_a_missing_command_exits_127_after_revoking(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    result = vault_env.run_process(
        "exec", "--task", str(vault_env.write_task(VAULT_TASK)), "--sandbox", "none", "--", "no-such-command-here"
    )
    assert result.code == 127
    assert not openbao.accessor_exists(issued_accessor(vault_env))


@needs_sandbox
def test_sigterm_to_the_broker_reaches_the_command_and_revokes(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    process = broker_process(vault_env, "exec", "--task", str(vault_env.write_task(VAULT_TASK)), "--", "sleep", "60")
    wait_for_issue(vault_env)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert not openbao.accessor_exists(issued_accessor(vault_env))
    assert vault_env.session_dirs() == []


def _running(command_line: str) -> bool:
    return bool(subprocess.run(["pgrep", "-f", command_line], capture_output=True, check=False).stdout.strip())


@needs_sandbox
def test_a_killed_broker_takes_the_sandbox_with_it_and_sweep_revokes(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    # A duration no other test uses, so pgrep sees only this sandbox's command.
    marker = "61.0731"
    process = broker_process(vault_env, "exec", "--task", str(vault_env.write_task(VAULT_TASK)), "--", "sleep", marker)
    wait_for_issue(vault_env)
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    session = vault_env.log_records()[0]["session"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(f"sleep {marker}"):
        time.sleep(0.1)
    assert not _running(f"sleep {marker}")
    assert openbao.accessor_exists(issued_accessor(vault_env))  # until sweep
    result = vault_env.run("sweep", "--json")
    assert result.code == 0 and result.json()["recovered"] == [session]
    assert not openbao.accessor_exists(issued_accessor(vault_env))
    assert vault_env.session_dirs() == []


def test_missing_bubblewrap_is_a_clear_error_before_anything_is_minted(vault_env: BrokerEnv, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sh").symlink_to(shutil.which("sh") or "/bin/sh")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "--config",
            str(vault_env.config_path),
            "exec",
            "--task",
            str(vault_env.write_task(VAULT_TASK)),
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        env={"PATH": str(bin_dir)},
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == "broker: error: bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)\n"
    assert vault_env.log_records() == []


def test_a_root_sandbox_is_refused_unless_the_policy_allows_it(vault_env: BrokerEnv) -> None:
    task = vault_env.write_task(VAULT_TASK.replace("uid: 1000, gid: 1000", "uid: 0, gid: 0"))
    result = vault_env.run("exec", "--task", str(task), "--sandbox", "none", "--", "true")
    assert result.code == 3 and "allow_root_sandbox" in result.stderr


def test_the_manifest_cannot_run_the_command_as_a_group_the_policy_does_not_list(vault_env: BrokerEnv) -> None:
    """The attack: as root, ``exec --sandbox none`` ran the agent's command as gid 6 (disk)."""
    narrow = vault_env.policy_dir / "agents.yaml"
    narrow.write_text(narrow.read_text().replace('sandbox_gids: ["0-65534"]', 'sandbox_gids: [1000, "2000-2999"]'))
    task = vault_env.write_task(VAULT_TASK.replace("uid: 1000, gid: 1000", "uid: 65534, gid: 6"))
    result = vault_env.run("exec", "--task", str(task), "--sandbox", "none", "--", "id")
    assert result.code == 3, result.stderr
    assert "sandbox gid 6 is not in its sandbox_gids" in result.stderr
    assert "uid=" not in result.stdout  # the command never ran
    denied = [r for r in vault_env.log_records() if r["event"] != "checkpoint"]
    assert [r["event"] for r in denied] == ["session.denied"]
    assert any("sandbox gid 6" in reason for reason in denied[0]["reasons"])


@needs_sandbox
@pytest.mark.parametrize("exit_code", [0, 4])
def test_the_sandbox_run_launcher_revokes_whatever_the_command_does(
    vault_env: BrokerEnv, openbao: OpenBao, exit_code: int
) -> None:
    script = Path(__file__).resolve().parents[3] / "scripts" / "sandbox-run"
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "BROKER_CONFIG": str(vault_env.config_path),
    }
    command = f'test -r /run/secrets/kv/token && test "$(id -u)" = 1000 && exit {exit_code}'
    result = subprocess.run(
        [str(script), str(vault_env.write_task(VAULT_TASK)), "--", "sh", "-c", command],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == exit_code, result.stderr
    assert "kv (vault): revoked" in result.stderr
    assert not openbao.accessor_exists(issued_accessor(vault_env))


@needs_sandbox
def test_exec_with_every_provider_inside_the_sandbox(
    stack_env: BrokerEnv, openbao: OpenBao, github_emulator: GitHubAppEmulator, tmp_path: Path
) -> None:
    """Inside bubblewrap the hints point at readable files: AWS credentials and config, the git config and
    the GitHub token, the Vault token; after the command every credential is revoked at its provider."""
    from tests.fixtures.stack import STACK_TASK

    script = (
        'test -r "$AWS_SHARED_CREDENTIALS_FILE" && test -r "$AWS_CONFIG_FILE" && test -r /run/secrets/kv/token'
        ' && git config --file "$GIT_CONFIG_GLOBAL" --get-regexp "credential.*helper" >/dev/null'
        " && test -r /run/secrets/repo/token && echo all-readable"
    )
    result = stack_env.run_process(
        "exec",
        "--task",
        str(stack_env.write_task(STACK_TASK)),
        "--network",
        "host",
        "--workspace",
        str(workspace(tmp_path)),
        "--",
        "sh",
        "-c",
        script,
    )
    assert result.code == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "all-readable"
    issued = {r["credential"]: r for r in stack_env.log_records() if r["event"] == "credential.issued"}
    outcomes = {r["credential"]: r["outcome"] for r in stack_env.log_records() if r["event"] == "credential.revoked"}
    assert outcomes == {"repo": "revoked", "artifacts": "revoked", "kv": "revoked"}
    assert not openbao.accessor_exists(issued["kv"]["reference"]["accessor"])
    assert len(github_emulator.calls_to("revoke_token")) == 1
    assert {github_emulator.token_state(token) for token in github_emulator.state.tokens} == {"revoked"}


CLIENTS = r"""
set -e
curl -sfS "http://127.0.0.1:$PORT/hello.txt"
git clone -q "http://127.0.0.1:$PORT/repo.git" clone && git -C clone log --format=%s
python3 -I -S - <<'PY'
import errno, os, socket, urllib.request
port = int(os.environ["PORT"])
# AI_ADDRCONFIG makes glibc ask netlink which address families exist: refused, it assumes both
found = socket.getaddrinfo("127.0.0.1", port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_ADDRCONFIG)
print(len(found) > 0, urllib.request.urlopen(f"http://127.0.0.1:{port}/hello.txt").read().decode().strip())
for family in (socket.AF_VSOCK, socket.AF_NETLINK):
    try:
        socket.socket(family, socket.SOCK_STREAM if family == socket.AF_VSOCK else socket.SOCK_RAW).close()
        print("opened", family)
    except OSError as exc:
        print(errno.errorcode[exc.errno])
PY
"""


@needs_sandbox
def test_curl_git_and_python_work_in_the_sandbox_where_only_unix_and_inet_sockets_open(
    vault_env: BrokerEnv, openbao: OpenBao, tmp_path: Path
) -> None:
    """The socket allow-list leaves the everyday clients working (host network, so they reach a local server)."""
    import functools
    import http.server
    import threading

    served = tmp_path / "served"
    served.mkdir()
    (served / "hello.txt").write_text("hello from the host\n")
    source = tmp_path / "source"
    subprocess.run(["git", "init", "-q", "-b", "main", str(source)], check=True)
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "-C", str(source), *identity, "commit", "-q", "--allow-empty", "-m", "first"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(served / "repo.git")], check=True)
    subprocess.run(["git", "-C", str(served / "repo.git"), "update-server-info"], check=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    task = vault_env.write_task(
        VAULT_TASK.replace(
            "mount_path: /run/secrets}", f"mount_path: /run/secrets, env: {{PORT: '{server.server_address[1]}'}}}}"
        )
    )
    try:
        result = vault_env.run_process(
            "exec", "--task", str(task), "--sandbox", "bwrap", "--network", "host",
            "--workspace", str(workspace(tmp_path)), "--", "sh", "-c", CLIENTS,
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert result.code == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "hello from the host",
        "first",
        "True hello from the host",
        "EAFNOSUPPORT",
        "EAFNOSUPPORT",
    ]
