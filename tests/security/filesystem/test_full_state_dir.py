"""A nearly full ``state_dir`` stops new issues, never a revoke or a sweep; a full one neither.

``state_dir`` (the issuance log and the SQLite store) is a small tmpfs the
test mounts, with ``[audit] min_free = "16MiB"``. Something else fills it
(a file of its own, as another program or a flood of evidence would): below
``min_free`` an issue is refused with exit 2 and one line naming the key,
before anything is minted; filled to the last byte, ``broker revoke`` and
``broker sweep`` still revoke at OpenBao and log it, on the room the broker
kept for them, and the log still verifies. Once there is room again, issues
work again. A running session's evidence never takes that room either: once
the disk is down to it, the session's proxy refuses (503), and the session's
end writes its last records there with its revocation.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.host import mounts
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.recording_api import RecordingAPI
from tests.fixtures.sandbox import sandbox_unavailable
from tests.security.egress.test_evidence_flood import POLICY, RULE
from tests.security.filesystem.targets import root_only

pytestmark = [root_only]

# The sandbox's client: a plain-HTTP GET (which the rule allows) through the session's proxy every 0.2 s, until one
# is refused; it prints the statuses it got.
UNTIL_REFUSED = r"""
import os, socket, sys, time
from urllib.parse import urlsplit
proxy, port = urlsplit(os.environ["http_proxy"]), int(sys.argv[1])
statuses, end = [], time.monotonic() + 60
while time.monotonic() < end and 503 not in statuses:
    s = socket.create_connection((proxy.hostname, proxy.port))
    s.sendall(f"GET http://127.0.0.1:{port}/{len(statuses)} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    statuses.append(int(data.split(b" ", 2)[1]))
    time.sleep(0.2)
print(*statuses)
"""
SHORT_TASK = VAULT_TASK.replace("ttl: 20m", "ttl: 4s").replace("ttl: 10m", "ttl: 4s")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs, the broker's own directory (0700, root's)."""
    path = tmp_path / "small-disk"
    path.mkdir(mode=0o700)
    mounts.mount_tmpfs(path, size="48m", mode=0o700, uid=0, gid=0)
    try:
        yield path
    finally:
        mounts.unmount(path)


def _read(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


def free(path: Path) -> int:
    info = os.statvfs(path)
    return info.f_bavail * info.f_frsize


def fill(path: Path, leave: int = 0) -> Path:
    """Another program's file on ``path``'s file system, until ``leave`` bytes are free (0: until it is full)."""
    filler = path / f"filler-{time.monotonic_ns()}"
    with open(filler, "wb") as out, contextlib.suppress(OSError):
        while (room := free(path) - leave) > 0:
            out.write(b"\0" * min(room, 1 << 20))
            out.flush()
    return filler


@pytest.mark.server
def test_a_full_state_dir_refuses_new_issues_and_still_revokes_and_sweeps(
    vault_env: BrokerEnv, openbao: OpenBao, small_disk: Path
) -> None:
    env = vault_env
    env.settings["state_dir"] = str(small_disk)
    env.tables["audit"] = {"min_free": "16MiB"}
    env.write_config()
    task, short = env.write_task(VAULT_TASK), env.write_task(SHORT_TASK, "short.yaml")
    issued = [env.run("issue", "--task", str(path), "--json") for path in (task, short)]
    assert [r.code for r in issued] == [0, 0], [r.stderr for r in issued]
    kept, expiring = (r.json()["session"] for r in issued)
    events = env.events()

    fill(small_disk, leave=8 << 20)  # below min_free: no new session
    refused = env.run("issue", "--task", str(task), "--json")
    assert refused.code == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(f"broker: error: state_dir {small_disk} has ")
    assert "less than [audit] min_free (16MiB)" in refused.stderr and "revoke and sweep still work" in refused.stderr
    assert env.events() == events and refused.stdout == ""  # nothing decided, minted or logged

    fill(small_disk)  # to the last byte
    assert free(small_disk) == 0
    revoked = env.run_process("revoke", "--session", kept, "--json")
    assert revoked.code == 0, revoked.stderr
    assert [c["outcome"] for c in revoked.json()["credentials"]] == ["revoked"]
    assert not (small_disk / "issuance.reserve").exists()  # the room it was kept for was given to the revoke
    time.sleep(4.5)  # the short session expires
    swept = env.run_process("sweep", "--json")
    assert swept.code == 0, swept.stderr
    assert swept.json()["expired"] == [expiring]
    ended = {
        r["session"]: r["event"] for r in env.log_records() if r["event"] in ("session.revoked", "session.expired")
    }
    assert ended == {kept: "session.revoked", expiring: "session.expired"}
    verified = env.run_process("audit", "verify")
    assert verified.code == 0, verified.stderr

    for filler in small_disk.glob("filler-*"):  # room again: issues work again, and the room is kept anew
        filler.unlink()
    again = env.run("issue", "--task", str(task), "--json")
    assert again.code == 0, again.stderr
    assert (small_disk / "issuance.reserve").stat().st_size == 16 << 20


@pytest.mark.server
@pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable()))
def test_a_running_session_s_evidence_never_takes_the_room_kept_for_revoke(
    vault_env: BrokerEnv, openbao: OpenBao, small_disk: Path
) -> None:
    env = vault_env
    api = RecordingAPI(None)
    try:
        env.settings["state_dir"] = str(small_disk)
        env.tables["audit"] = {"min_free": "16MiB"}
        env.write_config()
        env.write_policy(POLICY.format(rule=RULE, port=api.port))
        network = f'network:\n  allow: ["127.0.0.1:{api.port}"]\ncredentials:'
        task = env.write_task(VAULT_TASK.replace("credentials:", network))
        command = [sys.executable, "-m", "broker.cli", "--config", str(env.config_path), "exec", "--task", str(task)]
        command += ["--", "/usr/bin/python3", "-I", "-S", "-c", UNTIL_REFUSED, str(api.port)]
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as running:
            deadline = time.monotonic() + 60
            while b'"egress.request"' not in _read(env.log_path) and time.monotonic() < deadline:
                time.sleep(0.05)
            fill(small_disk, leave=4 << 20)  # below the 16 MiB kept for revoke and sweep, which stays whole
            stdout, stderr = running.communicate(timeout=120)
        assert running.returncode == 0, stderr[-2000:]
        statuses = [int(word) for word in stdout.split()]
        assert statuses[-1] == 503 and set(statuses[:-1]) == {200}, statuses
        assert len(api.requests()) == len(statuses) - 1  # the refused one never went upstream
    finally:
        api.close()
    # The session's teardown wrote every record on the room kept for it, the revocation after them.
    assert not (small_disk / "issuance.reserve").exists()
    verified = env.run_process("audit", "verify")
    assert verified.code == 0, verified.stderr
    records = env.log_records()
    [session] = {r["session"] for r in records if r["event"] == "session.issued"}
    events = [r["event"] for r in records if r["session"] == session]
    assert events.count("egress.request") == len(statuses) and events[-1] == "session.revoked"
