"""Revoking a session ``exec`` is running: its proxy refuses at once, before the provider's revocation lands.

A sandboxed command (bubblewrap, its own network namespace) keeps reading
from OpenBao through the session's proxy, which puts the real token in for
the placeholder it holds. An outside ``broker revoke`` must not wait for the
command to end: it asks the exec process (its control socket) and the proxy
refuses from then on. The provider's side of the revocation is held at a
gate in front of OpenBao, so the test looks at the moment between the two:
the token is still valid at OpenBao, and yet a request through the proxy,
the way the sandbox sends it, no longer gets through. The control socket
itself answers only root and the broker's own uid (``SO_PEERCRED``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.host.control import REFUSED, REQUEST, ControlSocket, ask_to_revoke
from broker.host.sandbox import EGRESS_SOCKET
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.gate import Gate, gate
from tests.fixtures.net import connect_unix
from tests.fixtures.openbao import ROOT_TOKEN, VAULT_TASK, OpenBao
from tests.fixtures.sandbox import sandbox_unavailable, vault_egress_policy
from tests.fixtures.tls import TLSFront, backend_port, make_test_ca

# Reads the secret again and again through the proxy, one answer's status a line, until it is stopped.
INSIDE = r"""
while :; do
  curl -sS --noproxy '' -o /dev/null -w '%{http_code}\n' -H "X-Vault-Token: $(cat /run/secrets/kv/token)" \
    "$VAULT_ADDR/v1/secret/data/ci/build" >> /workspace/codes 2>/dev/null || echo failed >> /workspace/codes
  sleep 0.2
done
"""

WAIT = 60.0


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.05)


def _descendants(pid: int) -> Iterator[int]:
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                yield int(child)
                yield from _descendants(int(child))


def _proxy_socket(exec_pid: int) -> str | None:
    """The host path of the session proxy's socket, as the exec process bound it into the sandbox."""
    for pid in _descendants(exec_pid):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if EGRESS_SOCKET.encode() in argv:
                return argv[argv.index(EGRESS_SOCKET.encode()) - 1].decode()
    return None


def _through_proxy(socket_path: str, port: int, trust: ssl.SSLContext, placeholder: str) -> int:
    """What the sandbox does: CONNECT through the proxy's socket, TLS with the session CA, read the secret."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.settimeout(20)
        connect_unix(raw, socket_path)
        raw.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        head = raw.recv(4096)
        if not head.startswith(b"HTTP/1.1 200"):
            return int(head.split()[1])
        with trust.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            request = f"GET /v1/secret/data/ci/build HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            tls.sendall(f"{request}X-Vault-Token: {placeholder}\r\nConnection: close\r\n\r\n".encode())
            return int(tls.recv(4096).split()[1])


@pytest.mark.server
@pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable()))
def test_an_outside_revoke_makes_the_proxy_refuse_before_the_provider_revokes(tmp_path: Path, openbao: OpenBao) -> None:
    openbao.client().secrets.kv.v2.create_or_update_secret(path="ci/build", secret={"value": "kept-in-vault"})
    (tmp_path / "ca").mkdir()
    test_ca = make_test_ca(tmp_path / "ca", ["vault.test"])
    front = TLSFront(test_ca.context, backend_port(openbao.addr))  # the sandbox's way to OpenBao
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    env = make_env(tmp_path)
    with gate(backend_port(openbao.addr), hold=b"revoke") as held:  # the provider's own way to OpenBao
        env.add_provider(
            "vault",
            {
                "type": "vault",
                "addr": held.addr,
                "token_file": str(env.write_secret("vault-token", ROOT_TOKEN)),
                "token_role": "broker-session",
                "proxy_hosts": [f"127.0.0.1:{front.port}"],
                "upstream_ca_file": str(test_ca.cert_file),
            },
        )
        env.write_policy(vault_egress_policy(front.port, max_uses=1000))
        task = env.write_task(
            VAULT_TASK.replace("credentials:", f'network:\n  allow: ["127.0.0.1:{front.port}"]\ncredentials:')
            .replace("    policies: [ci-read]", "    policies: [ci-read]\n    inject: proxy")
            .replace("num_uses: 5", "num_uses: 1000")
        )
        broker = [sys.executable, "-m", "broker.cli", "--config", str(env.config_path)]
        argv = [*broker, "exec", "--task", str(task), "--workspace", str(workspace), "--", "sh", "-c", INSIDE]
        running = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _check_revoke_while_running(env, openbao, running, held, front.port, broker)
            status = running.wait(timeout=WAIT)
            assert status == 128 + 15, running.stderr.read() if running.stderr else ""  # stopped with SIGTERM
        finally:
            if running.poll() is None:
                running.terminate()
                running.wait(timeout=WAIT)
            front.close()
            env.cleanup()
    issued = [r for r in env.log_records() if r["event"] == "credential.issued"]
    assert not openbao.accessor_exists(issued[0]["reference"]["accessor"])
    revoked = [r for r in env.log_records() if r["event"] == "credential.revoked"]
    assert [r["reason"] for r in revoked] == ["revoke"]


def _check_revoke_while_running(
    env: BrokerEnv, openbao: OpenBao, running: subprocess.Popen[str], held: Gate, port: int, broker: list[str]
) -> None:
    codes = env.root.parent / "workspace" / "codes"
    _wait_for(lambda: codes.exists() and "200" in codes.read_text().split(), "the sandbox reading its secret")
    issued = next(r for r in env.log_records() if r["event"] == "credential.issued")
    session, accessor = issued["session"], issued["reference"]["accessor"]
    placeholder = (env.runtime_dir / session / "kv" / "token").read_text()
    trust = ssl.create_default_context(cafile=str(env.runtime_dir / session / "ca.pem"))
    socket_path = _proxy_socket(running.pid)
    assert socket_path is not None
    assert _through_proxy(socket_path, port, trust, placeholder) == 200  # the way the sandbox gets through

    revoking = subprocess.Popen([*broker, "revoke", "--session", session], stdout=subprocess.PIPE, text=True)
    try:
        arrived = held.arrived.wait(timeout=WAIT)
        assert arrived, "the outside revoke waited for the command instead of stopping the proxy"
        # The provider's revocation has not landed (it is held at the gate) ...
        assert openbao.accessor_exists(accessor)
        # ... and yet the proxy already refuses what the sandbox would send.
        with pytest.raises(OSError):
            status = _through_proxy(socket_path, port, trust, placeholder)
            raise ConnectionRefusedError(f"the proxy still answered {status}")
        held.released.set()
        out, _ = revoking.communicate(timeout=WAIT)
        assert revoking.returncode == 0, out
        assert session in out and "revoked" in out
    finally:
        held.released.set()
        if revoking.poll() is None:
            revoking.kill()
            revoking.wait()


def test_the_control_socket_answers_only_root_and_the_broker_s_own_uid(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as another uid")
    asked = threading.Event()
    state_dir = tmp_path / ("a-long-state-directory-name-" * 4)  # past a socket address's 108 bytes
    with ControlSocket(state_dir, "s-4k2j9x7q3m1p", asked.set) as control:
        assert control.path.stat().st_mode & 0o777 == 0o600
        assert control.path.parent.stat().st_mode & 0o777 == 0o700
        # Suppose the modes were loosened: the kernel's word on the peer still refuses another uid.
        control.path.parent.chmod(0o711)
        control.path.chmod(0o666)
        fd = os.open(control.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            other = subprocess.run(
                ["/usr/bin/python3", "-I", "-S", "-c", OTHER_UID, f"/proc/self/fd/{fd}/{control.path.name}"],
                user=1000,
                group=1000,
                extra_groups=[],
                pass_fds=(fd,),
                capture_output=True,
                timeout=30,
                check=False,
            )
        finally:
            os.close(fd)
        assert other.returncode == 0, other.stderr
        assert other.stdout == REFUSED
        assert not asked.is_set()
        assert ask_to_revoke(state_dir, "s-4k2j9x7q3m1p")
        assert asked.is_set()
    assert not control.path.exists()
    assert not ask_to_revoke(state_dir, "s-4k2j9x7q3m1p")  # nobody listens any more


OTHER_UID = f"""
import socket, sys
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
client.settimeout(20)
client.connect(sys.argv[1])
try:
    client.sendall({REQUEST!r})
except OSError:
    pass  # refused before it was asked
sys.stdout.buffer.write(client.recv(64))
"""
