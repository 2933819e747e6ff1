"""A socket-group member racing the root daemon's egress socket: nothing outside the broker's own files changes.

The attacker is a uid with no account, in the daemon socket's group. It asks
for ``exec --network allowlist`` (it only claims bubblewrap: the daemon sets
up the proxy before the client runs anything) and, while the daemon creates
the proxy's socket, spins ``renameat2(RENAME_EXCHANGE)`` to swap a symbolic
link to a root-owned decoy into every directory it can write where the
socket appears. A daemon that sets the socket's mode or owner by path in a
directory the peer can write chowns the decoy to the peer (before the fix it
did, within a few tries); the fixed daemon makes the socket where no peer can
write, so the bounded loop never changes the decoy.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from broker.vocab.errors import BrokerError
from tests.fixtures.daemon import SOCKET_GID, WAIT, Daemon, _wait_for, daemon
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.sandbox import vault_egress_policy

__all__ = ["daemon"]
pytestmark = pytest.mark.server

ATTACKER_UID = 59123  # no account on the host; in the socket's group through SOCKET_GID
TRIES = 150

# Run as the attacker: ask for an allowlist exec, and meanwhile swap a link to the decoy in for proxy.sock.
ATTACKER = r"""
import ctypes, json, os, select, socket, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE, IN_CREATE = -100, 2, 0x100
daemon_socket, decoy, tries, roots, body = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5].encode()
before = os.stat(decoy)
head = b"POST /v1/exec HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)

def ask(done, held):
    connection = socket.socket(socket.AF_UNIX)
    connection.connect(daemon_socket)
    held.append(connection)
    connection.sendall(head + body)
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = connection.recv(65536)
        if not chunk:
            break
        answer += chunk
    held.append(answer.split(b" ", 2)[1:2])
    done.set()

def directories():
    for root in roots:
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for name in names:
            yield os.path.join(root, name)

def race(done):
    # plant the link in the first directory that becomes writable, then swap it in when proxy.sock appears
    while not done.is_set():
        for directory in directories():
            lure = os.path.join(directory, ".lure")
            try:
                os.symlink(decoy, lure)
            except OSError:
                continue
            return swap(done, directory, lure.encode(), os.path.join(directory, "proxy.sock").encode())
    return 0

def swap(done, directory, lure, target):
    watch = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    libc.inotify_add_watch(watch, directory.encode(), IN_CREATE)
    try:
        while not done.is_set():
            if libc.renameat2(AT_FDCWD, lure, AT_FDCWD, target, RENAME_EXCHANGE) == 0:
                return 1
            select.select([watch], [], [], 0.01)  # woken at once when the socket is made
            try:
                os.read(watch, 4096)
            except BlockingIOError:
                pass
        return 0
    finally:
        os.close(watch)

swaps = statuses = 0
for attempt in range(tries):
    done, held = threading.Event(), []
    asker = threading.Thread(target=ask, args=(done, held))
    asker.start()
    swaps += race(done)
    asker.join(60)
    statuses += held[1:] == [[b"201"]]
    for connection in held[:1]:
        connection.close()  # the daemon revokes the session
    after = os.stat(decoy)
    if (after.st_uid, after.st_gid, after.st_mode) != (before.st_uid, before.st_gid, before.st_mode):
        break
print(json.dumps({"tries": attempt + 1, "swaps": swaps, "started": statuses}))
"""


def test_a_peer_swapping_a_link_in_for_the_proxy_socket_never_gets_a_root_file_chowned(
    daemon: Daemon, openbao: OpenBao, monkeypatch: pytest.MonkeyPatch
) -> None:
    temporary = daemon.shared / "tmp"  # the daemon's TMPDIR: where it made the socket's directory before the fix
    temporary.mkdir(mode=0o755)
    monkeypatch.setenv("TMPDIR", str(temporary))
    decoy = daemon.shared / "decoy"
    decoy.write_text("root's own\n")
    decoy.chmod(0o644)
    before = decoy.stat()
    daemon.env.write_policy(vault_egress_policy(9))
    daemon.start()
    manifest = yaml.safe_load(VAULT_TASK.replace("credentials:", 'network:\n  allow: ["127.0.0.1:9"]\ncredentials:'))
    body = json.dumps({"manifest": manifest, "sandbox": "bwrap", "network": "allowlist"})
    runtime = daemon.env.runtime_dir
    roots = [str(temporary), str(runtime), *(str(p) for p in runtime.glob("*") if p.is_dir())]
    roots += [str(runtime / ".egress")]
    attack = subprocess.run(
        [
            "setpriv",
            f"--reuid={ATTACKER_UID}",
            f"--regid={SOCKET_GID}",
            "--clear-groups",
            "/usr/bin/python3",
            "-I",
            "-c",
            ATTACKER,
            str(daemon.socket),
            str(decoy),
            str(TRIES),
            json.dumps(roots),
            body,
        ],
        capture_output=True,
        text=True,
        timeout=WAIT * 10,
        check=False,
        cwd="/",
    )
    assert attack.returncode == 0, attack.stderr
    after = decoy.stat()
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (0, 0, 0o644), attack.stdout
    assert (before.st_uid, before.st_gid) == (0, 0)
    report = json.loads(attack.stdout)
    assert report == {"tries": TRIES, "swaps": 0, "started": TRIES}  # every exec started; no swap ever landed
    assert decoy.read_text() == "root's own\n"

    def states() -> set[str]:
        return {item["state"] for item in daemon.env.run("status", "--all", "--json").json()}

    _wait_for(lambda: states() == {"revoked"}, "every exec session to be revoked with its connection")


# Run as the attacker, owner of the daemon socket's directory: whenever broker.sock appears, swap a link in for it.
SOCKET_ATTACKER = r"""
import ctypes, os, select, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE, IN_CREATE = -100, 2, 0x100
directory, decoy = sys.argv[1], sys.argv[2]
lure, target = os.path.join(directory, ".lure").encode(), os.path.join(directory, "broker.sock").encode()
watch = libc.inotify_init1(os.O_CLOEXEC)
libc.inotify_add_watch(watch, directory.encode(), IN_CREATE)
print("ready", flush=True)
while not os.path.exists(os.path.join(directory, "stop")):
    if not os.path.lexists(lure):
        os.symlink(decoy, lure)
    if select.select([watch], [], [], 0.1)[0]:
        os.read(watch, 4096)
        libc.renameat2(AT_FDCWD, lure, AT_FDCWD, target, RENAME_EXCHANGE)
"""


def test_a_link_swapped_in_for_the_daemon_socket_while_it_is_made_changes_no_file(tmp_path: Path) -> None:
    """The daemon's own socket in a directory someone else can write (a misconfiguration): binding it still never
    chmods or chowns what a link swapped in for it points at."""
    from broker.daemon.server import bind_socket

    shared = Path(tempfile.mkdtemp(prefix="broker-socket-", dir="/tmp"))
    try:
        shared.chmod(0o755)
        directory = shared / "run"
        directory.mkdir()
        os.chown(directory, ATTACKER_UID, SOCKET_GID)
        decoy = shared / "decoy"
        decoy.write_text("root's own\n")
        decoy.chmod(0o644)
        attacker = subprocess.Popen(
            ["setpriv", f"--reuid={ATTACKER_UID}", f"--regid={SOCKET_GID}", "--clear-groups", "/usr/bin/python3"]
            + ["-I", "-c", SOCKET_ATTACKER, str(directory), str(decoy)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert attacker.stdout is not None and attacker.stdout.readline() == "ready\n"
            for _ in range(TRIES):
                with contextlib.suppress(BrokerError):  # a link already at the path: refused, nothing touched
                    bind_socket(directory / "broker.sock", str(SOCKET_GID)).close()
                for name in ("broker.sock", ".lure"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(directory / name)
                info = decoy.stat()
                if (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) != (0, 0, 0o644):
                    break
        finally:
            (directory / "stop").touch()
            attacker.wait(WAIT)
        info = decoy.stat()
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, 0, 0o644)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
