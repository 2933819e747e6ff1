"""scripts/boundary-check: on this host (it must fail and never print a secret), and in a real bubblewrap sandbox."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from broker.host.seccomp import program_fd
from tests.fixtures.sandbox import (
    SandboxSecrets,
    bwrap_command,
    python_runtime,
    sandbox_unavailable,
)

# a fixture; the redundant alias marks the import as used (re-exported) for pytest
from tests.fixtures.sandbox import sandbox_secrets as sandbox_secrets

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "boundary-check"
SCRIPT_IN_SANDBOX = "/opt/boundary-check/boundary-check"
CHECKS = [
    "not-root",
    "no-escalation",
    "no-host-secrets",
    "no-secret-in-env",
    "workspace-writable",
    "no-write-outside-workspace",
    "credentials-read-only",
    "secrets-dir-has-only-credentials",
    "network",
    "egress",
    "syscalls-refused",
    "socket-families",
]
SYSCALL_PROBES = [
    "ptrace(PTRACE_TRACEME)",
    "unshare(CLONE_NEWUSER)",
    "clone(CLONE_NEWUSER)",
    "clone3",
    "mount",
    "umount2",
    "setns",
    "keyctl",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
]
LINE = re.compile(r"^(PASS|FAIL|SKIP) ([a-z-]+): (.*)$")
CANARY = "canary-7Qz9xW2vLk4pR8sT1yU6"


def parse(stdout: str, stderr: str = "") -> dict[str, tuple[str, str]]:
    results = {}
    for line in stdout.splitlines():
        match = LINE.match(line)
        assert match, f"not a check line: {line!r}"
        results[match.group(2)] = (match.group(1), match.group(3))
    assert list(results) == CHECKS, f"incomplete output\n--- stdout\n{stdout}--- stderr\n{stderr}"
    return results


# --- on this host, without a sandbox ------------------------------------------------------------


@pytest.fixture
def planted(tmp_path: Path) -> dict[str, Path]:
    """A fake secrets dir holding the canary, a workspace and a home directory."""
    secrets_dir = tmp_path / "secrets"
    (secrets_dir / "kv").mkdir(parents=True)
    (secrets_dir / "session.json").write_text(json.dumps({"session": "s-host-test"}))
    token = secrets_dir / "kv" / "token"
    token.write_text(CANARY)
    for path in (token, secrets_dir / "session.json"):
        path.chmod(0o400)
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return {"secrets": secrets_dir, "token": token, "workspace": workspace, "home": home}


def run_host(planted: Mapping[str, Path], *args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(planted["home"])}
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--secrets-dir", str(planted["secrets"]), *args],
        cwd=planted["workspace"],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_script_is_executable_and_stdlib_only() -> None:
    assert SCRIPT.stat().st_mode & stat.S_IXUSR
    assert SCRIPT.read_text().startswith("#!/usr/bin/env python3\n")
    imports = re.findall(r"^(?:from|import) (\w+)", SCRIPT.read_text(), re.MULTILINE)
    assert set(imports) <= set(sys.stdlib_module_names) | {"__future__"}


def test_host_run_fails_and_never_prints_the_canary(planted: dict[str, Path]) -> None:
    result = run_host(planted, env={"BUILD_LABEL": CANARY})
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert CANARY not in output
    checks = parse(result.stdout, result.stderr)
    if os.geteuid() == 0:
        assert checks["not-root"][0] == "FAIL", output
        assert checks["no-escalation"][0] == "FAIL", output
    status, detail = checks["no-secret-in-env"]
    assert status == "FAIL" and "BUILD_LABEL" in detail, output
    assert checks["network"][0] == "SKIP"
    assert checks["workspace-writable"][0] == "PASS", output
    # the probes left the credential as it was, and nothing behind
    assert planted["token"].read_text() == CANARY
    assert stat.S_IMODE(planted["token"].stat().st_mode) == 0o400
    assert sorted(p.name for p in planted["secrets"].rglob("*")) == ["kv", "session.json", "token"]
    assert list(planted["workspace"].iterdir()) == []


def test_json_output(planted: dict[str, Path]) -> None:
    result = run_host(planted, "--json", env={"SOME_VALUE": f"prefix-{CANARY}-suffix"})
    assert result.returncode == 1
    assert CANARY not in result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert document["ok"] is False
    assert [check["name"] for check in document["checks"]] == CHECKS
    assert all(set(check) == {"name", "status", "detail"} for check in document["checks"])
    by_name = {check["name"]: check for check in document["checks"]}
    assert by_name["no-secret-in-env"]["status"] == "FAIL"
    assert "SOME_VALUE" in by_name["no-secret-in-env"]["detail"]


def test_secret_looking_names_and_allowed_hints(planted: dict[str, Path]) -> None:
    env = {
        "GITHUB_TOKEN": "x",
        "DB_PASS": "y",
        "OPENAI_API_KEY": "z",
        "AWS_SHARED_CREDENTIALS_FILE": "/run/secrets/aws/credentials",
        "GIT_CONFIG_GLOBAL": "/run/secrets/repo/gitconfig",
        "VAULT_ADDR": "http://127.0.0.1:8200",
        "BROKER_SESSION": "s-host-test",
        "KEYMAP": "us",
    }
    status, detail = parse(run_host(planted, env=env).stdout)["no-secret-in-env"]
    assert status == "FAIL"
    named = detail.split("secret-looking names: ")[1].split(" (")[0].split(", ")
    assert sorted(named) == ["DB_PASS", "GITHUB_TOKEN", "OPENAI_API_KEY"]


def test_url_with_password_in_env(planted: dict[str, Path]) -> None:
    status, detail = parse(run_host(planted, env={"DATABASE_URL": "postgres://app:hunter2@db/x"}).stdout)[
        "no-secret-in-env"
    ]
    assert status == "FAIL" and "DATABASE_URL" in detail and "hunter2" not in detail


def test_secrets_dir_must_hold_only_regular_files(planted: dict[str, Path]) -> None:
    (planted["secrets"] / "session.json").unlink()
    (planted["secrets"] / "kv" / "link").symlink_to("/etc/hostname")
    os.mkfifo(planted["secrets"] / "pipe")
    status, detail = parse(run_host(planted, env={}).stdout)["secrets-dir-has-only-credentials"]
    assert status == "FAIL"
    assert "kv/link is a symlink" in detail and "pipe is a fifo" in detail and "no session.json" in detail


def test_missing_secrets_dir_skips(tmp_path: Path) -> None:
    paths = {"secrets": tmp_path / "absent", "workspace": tmp_path, "home": tmp_path}
    checks = parse(run_host(paths, env={}).stdout)
    assert checks["credentials-read-only"][0] == "SKIP"
    assert checks["secrets-dir-has-only-credentials"][0] == "SKIP"


def test_usage_error_exits_2() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--no-such-option"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2


# --- inside a real bubblewrap sandbox -----------------------------------------------------------

sandboxed = pytest.mark.skipif(sandbox_unavailable() is not None, reason=sandbox_unavailable() or "")


@pytest.fixture
def broker_host(tmp_path: Path) -> dict[str, Path]:
    """The broker's files on the host (never bound into the sandbox) and a workspace owned by uid 1000."""
    config = tmp_path / "etc-broker"
    state = tmp_path / "var-lib-broker"
    config.mkdir(mode=0o755)
    state.mkdir(mode=0o755)
    (config / "broker.toml").write_text('state_dir = "/var/lib/broker"\n')
    (config / "broker.toml").chmod(0o644)  # an operator who got a mode wrong: readable if bound
    audit_key = config / "audit.key"
    audit_key.write_text("audit-key-material\n")
    audit_key.chmod(0o400)
    workspace = tmp_path / "workspace"
    workspace.mkdir(mode=0o700)
    os.chown(workspace, 1000, 1000)
    return {"config": config, "state": state, "audit_key": audit_key, "workspace": workspace}


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A port that IS open on the host's loopback: the sandbox must not reach it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def run_sandboxed(
    secrets: SandboxSecrets,
    host: Mapping[str, Path],
    port: int,
    *,
    env: Mapping[str, str] | None = None,
    extra_binds: Sequence[tuple[Path | str, str]] = (),
    secrets_writable: bool = False,
    identity: str | None = None,
    seccomp: bool = True,
) -> subprocess.CompletedProcess[str]:
    python, prefix = python_runtime()
    binds: list[tuple[Path | str, str]] = [(SCRIPT, SCRIPT_IN_SANDBOX), *extra_binds]
    if prefix != "/usr" and not prefix.startswith("/usr/"):  # /usr (and /usr/local) is bound already
        binds.append((prefix, prefix))
    with program_fd() as fd:
        command = bwrap_command(
            secrets.path,
            host["workspace"],
            binds,
            {"BROKER_SESSION": secrets.session, **(env or {})},
            False,
            secrets_writable=secrets_writable,
            identity=identity,
            seccomp_fd=fd if seccomp else None,
        )
        command += [python, SCRIPT_IN_SANDBOX, "--expect-no-network", "--loopback-port", str(port)]
        command += ["--forbid", str(host["config"]), str(host["state"]), str(host["audit_key"])]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, pass_fds=(fd,))


def vsock_available() -> bool:
    try:
        socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
    except OSError:
        return False
    return True


def explain(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}"


@sandboxed
@pytest.mark.root
def test_boundary_holds_in_bwrap(
    sandbox_secrets: SandboxSecrets, broker_host: dict[str, Path], host_listener: int
) -> None:
    result = run_sandboxed(sandbox_secrets, broker_host, host_listener)
    assert sandbox_secrets.token not in result.stdout + result.stderr
    assert result.returncode == 0, explain(result)
    checks = parse(result.stdout, result.stderr)
    # no proxy in this sandbox: tests/integration/egress/test_exec.py runs that check
    assert checks.pop("egress")[0] == "SKIP"
    assert all(status == "PASS" for status, _ in checks.values()), explain(result)
    assert "uid=1000 euid=1000" in checks["not-root"][1]
    assert "ENETUNREACH" in checks["network"][1]
    refused = checks["syscalls-refused"][1].split(", ")
    assert all(probe.endswith(" EPERM") for probe in refused if not probe.startswith("clone3")), refused
    assert "clone3 ENOSYS" in refused and len(refused) == len(SYSCALL_PROBES)
    assert "io_uring_setup EPERM" in refused
    families = checks["socket-families"][1]
    for family in ("netlink", "packet", "alg", "vsock", "socketpair(netlink)"):
        assert f"{family} EAFNOSUPPORT" in families, families
    assert families.endswith("open: unix, inet, inet6"), families


@sandboxed
@pytest.mark.root
def test_without_the_seccomp_filter_every_syscall_probe_fails(
    sandbox_secrets: SandboxSecrets, broker_host: dict[str, Path], host_listener: int
) -> None:
    """The same sandbox without ``--seccomp``: each probe reaches the kernel (so the check tests the filter,
    not the sandbox user's missing privileges), and user namespaces, ptrace and userfaultfd even work."""
    result = run_sandboxed(sandbox_secrets, broker_host, host_listener, seccomp=False)
    checks = parse(result.stdout, result.stderr)
    assert result.returncode == 1, explain(result)
    status, detail = checks["syscalls-refused"]
    assert status == "FAIL" and detail.endswith("; refused: -"), explain(result)
    outcomes = dict(entry.split(" ", 1) for entry in detail.removesuffix("; refused: -").split("; "))
    assert list(outcomes) == SYSCALL_PROBES, detail
    for probe in ("ptrace(PTRACE_TRACEME)", "unshare(CLONE_NEWUSER)", "clone(CLONE_NEWUSER)", "userfaultfd"):
        assert outcomes[probe] == "succeeded", detail
    if Path("/proc/sys/kernel/io_uring_disabled").read_text().strip() == "0":
        assert outcomes["io_uring_setup"] == "succeeded", detail
    assert all(o == "succeeded" or o.startswith("reached the kernel") for o in outcomes.values()), detail
    # netlink opens in any network namespace; vsock wherever the kernel has it (this machine's does, a VM's guest)
    status, detail = checks["socket-families"]
    assert status == "FAIL" and "netlink succeeded" in detail and "socketpair(netlink) reached the kernel" in detail
    if vsock_available():
        assert "vsock succeeded" in detail, detail
    assert detail.endswith("open: unix, inet, inet6"), detail
    unfiltered = ("syscalls-refused", "socket-families", "egress")
    others = {name: status for name, (status, _) in checks.items() if name not in unfiltered}
    assert set(others.values()) == {"PASS"}, explain(result)


@sandboxed
@pytest.mark.root
def test_writable_secrets_mount_fails(
    sandbox_secrets: SandboxSecrets, broker_host: dict[str, Path], host_listener: int
) -> None:
    result = run_sandboxed(sandbox_secrets, broker_host, host_listener, secrets_writable=True)
    checks = parse(result.stdout, result.stderr)
    assert result.returncode == 1, explain(result)
    assert checks["credentials-read-only"][0] == "FAIL", explain(result)
    assert sandbox_secrets.token not in result.stdout + result.stderr
    # the check put everything back
    token = sandbox_secrets.path / "kv" / "token"
    assert token.read_text() == sandbox_secrets.token
    assert stat.S_IMODE(token.stat().st_mode) == 0o400


@sandboxed
@pytest.mark.root
def test_token_in_env_fails(sandbox_secrets: SandboxSecrets, broker_host: dict[str, Path], host_listener: int) -> None:
    result = run_sandboxed(sandbox_secrets, broker_host, host_listener, env={"VAULT_TOKEN": sandbox_secrets.token})
    checks = parse(result.stdout, result.stderr)
    assert result.returncode == 1, explain(result)
    status, detail = checks["no-secret-in-env"]
    assert status == "FAIL" and "VAULT_TOKEN" in detail, explain(result)
    assert sandbox_secrets.token not in result.stdout + result.stderr


@sandboxed
@pytest.mark.root
def test_bound_broker_config_fails(
    sandbox_secrets: SandboxSecrets, broker_host: dict[str, Path], host_listener: int
) -> None:
    config = broker_host["config"]
    result = run_sandboxed(sandbox_secrets, broker_host, host_listener, extra_binds=[(config, str(config))])
    status, detail = parse(result.stdout, result.stderr)["no-host-secrets"]
    assert result.returncode == 1, explain(result)
    assert status == "FAIL" and str(config) in detail, explain(result)


@sandboxed
@pytest.mark.root
def test_user_namespace_started_by_root_is_caught(
    sandbox_secrets: SandboxSecrets, broker_host: dict[str, Path], host_listener: int
) -> None:
    """``bwrap --unshare-user --uid 1000`` run by root maps uid 1000 to host uid 0: not-root must say so."""
    # That process is host uid 0 without capabilities: it cannot even enter the 0700 workspace of uid 1000.
    broker_host["workspace"].chmod(0o777)
    result = run_sandboxed(sandbox_secrets, broker_host, host_listener, identity="userns")
    status, detail = parse(result.stdout, result.stderr)["not-root"]
    assert result.returncode == 1, explain(result)
    assert status == "FAIL" and "uid 0 outside" in detail, explain(result)
