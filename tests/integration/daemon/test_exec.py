"""``broker exec`` through the daemon, for real: the client runs bubblewrap, the daemon holds the session and the proxy.

The allowed destination is an HTTP server on the host's loopback; inside the
sandbox's network namespace only the daemon's egress proxy (bound in as a
Unix socket) reaches it. The session lives exactly as long as the client's
connection.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.daemon import WAIT, Daemon, _wait_for, daemon
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.sandbox import sandbox_unavailable, vault_egress_policy
from tests.integration.egress.test_proxy import Sink, Upstream, sink, upstream

__all__ = ["daemon", "sink", "upstream"]  # fixtures
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]


INSIDE = r"""
test -r /run/secrets/kv/token && echo "token-readable"
echo "proxy=$https_proxy"
curl -sS --noproxy '' -o /dev/null -w 'allowed=%{{http_code}}\n' http://127.0.0.1:{up}/through
curl -sS --noproxy '' -o /dev/null -w 'other=%{{http_code}}\n' http://127.0.0.1:{sink}/
curl -sS --noproxy '*' --max-time 5 -o /dev/null http://127.0.0.1:{up}/direct 2>/dev/null; echo "direct-exit=$?"
exit 3
"""


def _start(daemon: Daemon, upstream: Upstream) -> Path:
    daemon.env.runtime_dir = daemon.shared / "run"  # as /run/broker: short enough for a socket's address
    daemon.env.write_config()
    daemon.env.write_policy(vault_egress_policy(upstream.port))
    daemon.start()
    text = VAULT_TASK.replace("credentials:", f'network:\n  allow: ["127.0.0.1:{upstream.port}"]\ncredentials:')
    return daemon.task(text)


def _workspace(daemon: Daemon) -> Path:
    path = daemon.shared / "workspace"
    path.mkdir()
    os.chown(path, 1000, 1000)
    return path


def _states(daemon: Daemon) -> dict[str, str]:
    return {item["session"]: item["state"] for item in daemon.env.run("status", "--all", "--json").json()}


def _accessors(daemon: Daemon) -> list[str]:
    return [r["reference"]["accessor"] for r in daemon.env.log_records() if r["event"] == "credential.issued"]


def _proxy_sockets(daemon: Daemon) -> list[Path]:
    """The egress proxies' sockets the daemon made: ``runtime_dir/.egress/<session>/proxy.sock``."""
    return sorted((daemon.env.runtime_dir / ".egress").glob("s-*/proxy.sock"))


def _client_process(daemon: Daemon, *args: str) -> subprocess.Popen[str]:
    environment = {"PATH": os.environ["PATH"], "BROKER_SOCKET": str(daemon.socket), "HOME": "/"}
    return subprocess.Popen(
        [sys.executable, "-m", "broker", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
        cwd="/",
    )


def test_exec_through_the_daemon_reads_its_credential_and_reaches_only_what_is_allowed(
    daemon: Daemon, openbao: OpenBao, upstream: Upstream, sink: Sink
) -> None:
    task = _start(daemon, upstream)
    script = INSIDE.format(up=upstream.port, sink=sink.port)
    result = daemon.client("exec", "--task", str(task), "--", "sh", "-c", script)
    assert result.code == 3, result.stderr  # the command's status, as direct exec
    lines = result.stdout.splitlines()
    assert lines[:2] == ["token-readable", "proxy=http://127.0.0.1:3128"]
    assert "allowed=200" in lines and "other=403" in lines
    assert "direct-exit=7" in lines  # no way out but the daemon's proxy
    assert [r["path"] for r in upstream.requests] == ["/through"]
    assert sink.accepted == []
    [(session, state)] = _states(daemon).items()
    assert state == "revoked"  # revoked when the client's command ended
    assert not any(openbao.accessor_exists(accessor) for accessor in _accessors(daemon))
    denied = [r for r in daemon.env.log_records() if r["event"] == "egress.denied"]
    assert [(r["session"], r["destination"], r["count"]) for r in denied] == [(session, f"127.0.0.1:{sink.port}", 1)]
    assert daemon.env.run("audit", "verify").code == 0


def test_a_sigkilled_exec_client_gets_its_session_revoked_by_the_daemon(
    daemon: Daemon, openbao: OpenBao, upstream: Upstream
) -> None:
    task = _start(daemon, upstream)
    workspace = _workspace(daemon)
    script = "cat /run/secrets/kv/token > /dev/null && touch /workspace/started && exec sleep 600"
    client = _client_process(
        daemon, "exec", "--task", str(task), "--workspace", str(workspace), "--", "sh", "-c", script
    )
    try:
        _wait_for(lambda: (workspace / "started").exists() or client.poll() is not None, "the sandboxed command")
        assert client.poll() is None, client.communicate()
        [session] = _states(daemon)
        assert _states(daemon)[session] == "active"
        client.kill()
        client.wait(WAIT)
    finally:
        if client.poll() is None:
            client.kill()
    _wait_for(lambda: _states(daemon)[session] == "revoked", "the daemon to revoke the session")
    assert not any(openbao.accessor_exists(accessor) for accessor in _accessors(daemon))
    revoked = [r for r in daemon.env.log_records() if r["event"] == "credential.revoked"]
    assert [r["reason"] for r in revoked] == ["exec ended"]
    assert daemon.env.run("audit", "verify").code == 0


def _through_proxy(path: Path, port: int, target: str) -> str:
    """The status line of a plain-HTTP request sent through the proxy's socket, or the error that stopped it."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(WAIT)
            sock.connect(str(path))
            sock.sendall(
                f"GET http://127.0.0.1:{port}{target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
            )
            return sock.makefile("rb").readline().decode().strip()
    except OSError as exc:
        return type(exc).__name__


def _revoked_during_exec(
    daemon: Daemon,
    openbao: OpenBao,
    upstream: Upstream,
    revoke: Callable[[str], tuple[int, str]],
) -> None:
    """Revoke (``revoke(session)``: its exit code and stderr) while the command runs: the proxy refuses, the
    command is stopped, the credential is revoked once, for the reason ``revoke``."""
    task = _start(daemon, upstream)
    workspace = _workspace(daemon)
    script = "touch /workspace/started; exec sleep 600"
    client = _client_process(
        daemon, "exec", "--task", str(task), "--workspace", str(workspace), "--", "sh", "-c", script
    )
    try:
        _wait_for(lambda: (workspace / "started").exists() or client.poll() is not None, "the sandboxed command")
        [proxy] = _proxy_sockets(daemon)
        assert _through_proxy(proxy, upstream.port, "/before").startswith("HTTP/1.1 200")
        [session] = _states(daemon)
        code, errors = revoke(session)
        assert code == 0, errors
        assert _through_proxy(proxy, upstream.port, "/after") in ("FileNotFoundError", "ConnectionRefusedError")
        assert _states(daemon)[session] == "revoked"
        _, stderr = client.communicate(timeout=WAIT)
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode == 128 + signal.SIGTERM, stderr  # the command was stopped, as direct exec stops it
    assert [r["path"] for r in upstream.requests] == ["/before"]
    assert not any(openbao.accessor_exists(accessor) for accessor in _accessors(daemon))
    assert [r["reason"] for r in daemon.env.log_records() if r["event"] == "credential.revoked"] == ["revoke"]
    assert daemon.env.run("audit", "verify").code == 0


def test_revoking_during_exec_makes_the_proxy_refuse_at_once_and_stops_the_command(
    daemon: Daemon, openbao: OpenBao, upstream: Upstream
) -> None:
    def through_the_daemon(session: str) -> tuple[int, str]:
        revoked = daemon.client("revoke", "--session", session)
        return revoked.code, revoked.stderr

    _revoked_during_exec(daemon, openbao, upstream, through_the_daemon)


def test_a_direct_revoke_on_the_daemons_host_asks_the_daemon_and_stops_the_command(
    daemon: Daemon, openbao: OpenBao, upstream: Upstream
) -> None:
    direct = daemon.env.root / "direct.toml"  # the daemon's own config, minus its socket: direct mode, as root
    text = daemon.env.config_path.read_text()
    direct.write_text("\n".join(line for line in text.splitlines() if not line.startswith("socket = ")) + "\n")

    def direct_mode(session: str) -> tuple[int, str]:
        revoked = subprocess.run(
            [sys.executable, "-m", "broker", "--config", str(direct), "revoke", "--session", session],
            capture_output=True,
            text=True,
            env={"PATH": os.environ["PATH"], "HOME": "/"},
            timeout=WAIT,  # before the daemon listened for it: "locked by another broker process" after 60 s
            check=False,
        )
        return revoked.returncode, revoked.stderr

    _revoked_during_exec(daemon, openbao, upstream, direct_mode)


def test_exec_through_the_daemon_keeps_the_direct_exit_codes(daemon: Daemon, upstream: Upstream) -> None:
    task = _start(daemon, upstream)
    missing = daemon.client("exec", "--task", str(task), "--", "no-such-command-here")
    assert missing.code == 127, missing.stderr
    refused = daemon.client("exec", "--task", str(task), "--sandbox", "none", "--network", "allowlist", "--", "true")
    assert refused.code == 2 and "--network allowlist needs --sandbox bwrap" in refused.stderr
    signalled = daemon.client("exec", "--task", str(task), "--", "sh", "-c", "kill -TERM $$")
    assert signalled.code == 128 + signal.SIGTERM, signalled.stderr
    assert set(_states(daemon).values()) == {"revoked"}


def test_a_launcher_that_is_not_root_runs_exec_through_the_daemon_in_a_user_namespace(
    daemon: Daemon, openbao: OpenBao, upstream: Upstream, sink: Sink
) -> None:
    task = _start(daemon, upstream)  # runtime_dir as /run/broker: a launcher may pass through to its sessions
    script = INSIDE.format(up=upstream.port, sink=sink.port)
    result = daemon.client("exec", "--task", str(task), "--", "sh", "-c", script, uid=1000)
    assert result.code == 3, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "token-readable" and "allowed=200" in lines and "other=403" in lines
    assert [r["path"] for r in upstream.requests] == ["/through"]
    assert set(_states(daemon).values()) == {"revoked"}
    assert not any(openbao.accessor_exists(accessor) for accessor in _accessors(daemon))


def test_sigterm_to_the_daemon_revokes_the_exec_session_it_holds(daemon: Daemon, upstream: Upstream) -> None:
    task = _start(daemon, upstream)
    workspace = _workspace(daemon)
    script = "touch /workspace/started; exec sleep 600"
    client = _client_process(
        daemon, "exec", "--task", str(task), "--workspace", str(workspace), "--", "sh", "-c", script
    )
    try:
        _wait_for(lambda: (workspace / "started").exists() or client.poll() is not None, "the sandboxed command")
        [session] = _states(daemon)
        assert daemon.stop(signal.SIGTERM) == 0  # it does not wait for the launcher: it ends the session
        assert _states(daemon)[session] == "revoked"
        _, stderr = client.communicate(timeout=WAIT)
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode == 128 + signal.SIGTERM, stderr  # its session ended under it: the command is stopped
    revoked = [r for r in daemon.env.log_records() if r["event"] == "credential.revoked"]
    assert [r["reason"] for r in revoked] == ["daemon stopped"]


def test_the_sandbox_user_outside_the_sandbox_cannot_reach_a_root_launchers_proxy(
    daemon: Daemon, upstream: Upstream
) -> None:
    task = _start(daemon, upstream)
    workspace = _workspace(daemon)
    script = "touch /workspace/started; while [ ! -e /workspace/go ]; do sleep 0.05; done"
    client = _client_process(
        daemon, "exec", "--task", str(task), "--workspace", str(workspace), "--", "sh", "-c", script
    )
    try:
        _wait_for(lambda: (workspace / "started").exists() or client.poll() is not None, "the sandboxed command")
        [socket_path] = _proxy_sockets(daemon)
        probe = "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1])\nexcept OSError as e:\n print(type(e).__name__)\nelse:\n print('connected')\n"
        outside = subprocess.run(
            [
                "setpriv",
                "--reuid=1000",
                "--regid=1000",
                "--clear-groups",
                "/usr/bin/python3",
                "-c",
                probe,
                str(socket_path),
            ],
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=True,
        )
        assert outside.stdout.strip() == "PermissionError"  # only the sandbox, where bwrap bound it, reaches it
        (workspace / "go").touch()
        _, stderr = client.communicate(timeout=WAIT)
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode == 0, stderr


def test_a_sigkilled_daemon_stops_the_command_and_its_next_sweep_revokes_the_session(
    daemon: Daemon, openbao: OpenBao, upstream: Upstream
) -> None:
    task = _start(daemon, upstream)
    workspace = _workspace(daemon)
    script = "touch /workspace/started; exec sleep 600"
    client = _client_process(
        daemon, "exec", "--task", str(task), "--workspace", str(workspace), "--", "sh", "-c", script
    )
    try:
        _wait_for(lambda: (workspace / "started").exists() or client.poll() is not None, "the sandboxed command")
        [session] = _states(daemon)
        assert daemon.stop(signal.SIGKILL) == -signal.SIGKILL
        _, stderr = client.communicate(timeout=WAIT)
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode == 128 + signal.SIGTERM, stderr
    assert stderr == f"broker: error: session {session}: the broker daemon went away; broker sweep revokes it\n"
    assert _states(daemon)[session] == "active"
    daemon.start()  # its first sweep finds the exec-bound session nobody holds
    _wait_for(lambda: _states(daemon)[session] == "revoked", "the sweep")
    assert not any(openbao.accessor_exists(accessor) for accessor in _accessors(daemon))
    assert [r["reason"] for r in daemon.env.log_records() if r["event"] == "credential.revoked"] == ["exec broker gone"]
