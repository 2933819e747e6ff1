"""One member of the socket's group cannot starve the daemon: idle connections end, each uid has a ceiling.

The hog is a uid with no account, in the socket's group, opening hundreds of
connections and sending nothing. Before the fix its idle connections held
every slot forever and the accept loop waited for one: root's ``GET
/v1/health`` got no answer for as long as the hog lived. Now the hog holds at
most ``[daemon] max_connections_per_uid``, the rest are answered 503 and
closed at once, a connection that sends no request head within 10 s is
closed, and root is always served.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import SOCKET_GID, WAIT, Daemon, daemon
from tests.fixtures.openbao import OpenBao

__all__ = ["daemon"]
pytestmark = pytest.mark.server

HOG_UID = 59123  # no account on the host
PER_UID = 32  # the default of [daemon] max_connections_per_uid
ANSWERED = 30.0  # generous: before the fix root's health request was never answered at all

# Run as the hog: open COUNT connections and send nothing (or, with "keep", a health request every second,
# so they stay), say "open", then report how each ended: a 503, closed without a word, or still open.
HOG = r"""
import json, select, socket, sys, time
path, count, keep, last = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "keep", float(sys.argv[4])
open_ = []
for _ in range(count):
    connection = socket.socket(socket.AF_UNIX)
    connection.connect(path)  # blocks while the daemon's backlog is full
    open_.append(connection)
print("open", flush=True)
ends, answers = {}, {}
deadline = time.monotonic() + last
ping = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
pinged = 0.0
while time.monotonic() < deadline and len(ends) < len(open_):
    if keep and time.monotonic() - pinged >= 1.0:
        pinged = time.monotonic()
        for index, connection in enumerate(open_):
            if index not in ends:
                connection.sendall(ping)
    ready, _, _ = select.select([c for i, c in enumerate(open_) if i not in ends], [], [], 1.0)
    for connection in ready:
        index = open_.index(connection)
        try:
            data = connection.recv(65536)
        except OSError:
            data = b""
        answers[index] = answers.get(index, b"") + data
        if not data:
            head = answers[index][:12]
            ends[index] = "busy" if head == b"HTTP/1.1 503" else "closed" if not head else "answered"
        elif keep:
            answers[index] = b""
report = {"opened": len(open_)}
for index in range(len(open_)):
    end = ends.get(index, "open")
    report[end] = report.get(end, 0) + 1
print(json.dumps(report), flush=True)
"""


class Hog:
    """The hog process as ``uid``: started, then waited for until it opened every connection."""

    def __init__(self, daemon: Daemon, uid: int, count: int, *, keep: bool = False, last: float = 40.0) -> None:
        self.process = subprocess.Popen(
            [
                "setpriv",
                f"--reuid={uid}",
                f"--regid={SOCKET_GID}",
                "--clear-groups",
                "/usr/bin/python3",
                "-I",
                "-c",
                HOG,
                str(daemon.socket),
                str(count),
                "keep" if keep else "idle",
                str(last),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline() == "open\n", self.process.stderr.read() if self.process.stderr else ""

    def report(self) -> dict[str, int]:
        stdout, stderr = self.process.communicate(timeout=WAIT * 2)
        assert self.process.returncode == 0, stderr
        return dict(json.loads(stdout))

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _health(path: Path) -> tuple[float, Any]:
    """Root's ``GET /v1/health``: how long the answer took and its status line (None: no answer in ANSWERED)."""
    began = time.monotonic()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(ANSWERED)
        try:
            while True:  # a connect with a timeout is refused (EAGAIN) while the listen queue is full: a blocking
                try:  # client would wait there, so this one waits too, within ANSWERED
                    sock.connect(str(path))
                    break
                except BlockingIOError:
                    if time.monotonic() - began > ANSWERED:
                        raise TimeoutError from None
                    time.sleep(0.01)
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            line = sock.makefile("rb").readline().decode().strip()
        except TimeoutError:
            line = None
    return time.monotonic() - began, line


def test_hundreds_of_idle_connections_from_one_uid_leave_root_served_and_get_503(
    daemon: Daemon, openbao: OpenBao
) -> None:
    daemon.start()
    hog = Hog(daemon, HOG_UID, 600)
    try:
        took, line = _health(daemon.socket)
        report = hog.report()
    finally:
        hog.kill()
    assert line is not None and line.startswith("HTTP/1.1 200"), f"root got no answer in {took:.0f}s"
    # PER_UID were served and closed when they sent nothing within 10 s; every other one was told 503 at once.
    assert report == {"opened": 600, "busy": 600 - PER_UID, "closed": PER_UID}
    assert str(_health(daemon.socket)[1]).startswith("HTTP/1.1 200")


def test_a_connection_that_sends_nothing_is_closed_and_a_partial_head_gets_408(daemon: Daemon) -> None:
    daemon.start()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent, socket.socket(socket.AF_UNIX) as partial:
        silent.settimeout(ANSWERED)
        partial.settimeout(ANSWERED)
        silent.connect(str(daemon.socket))
        partial.connect(str(daemon.socket))
        partial.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        try:
            closed = silent.recv(65536)
        except TimeoutError:
            closed = None
        timed_out = partial.makefile("rb").readline()
    assert closed == b"", "an idle connection was never closed"
    assert timed_out.startswith(b"HTTP/1.1 408")


def test_past_its_limit_a_uid_is_told_the_daemon_is_busy_while_other_uids_and_root_are_served(
    daemon: Daemon, openbao: OpenBao
) -> None:
    daemon.env.tables["daemon"]["max_connections_per_uid"] = 2
    daemon.env.write_config()
    daemon.start()
    hog = Hog(daemon, HOG_UID, 2, keep=True, last=8.0)  # two connections kept busy with requests: allowed
    try:
        refused = daemon.client("status", uid=HOG_UID)
        other = daemon.client("status", "--json", uid=HOG_UID + 1)
        mine = daemon.client("status", "--json")
        report = hog.report()
    finally:
        hog.kill()
    assert (refused.code, refused.stdout) == (7, "")
    assert refused.stderr == (
        f"broker: error: the broker daemon is busy: uid {HOG_UID} already holds 2 connections"
        " ([daemon] max_connections_per_uid)\n"
    )
    assert (other.code, other.json()) == (0, [])
    assert mine.code == 0, mine.stderr
    assert report == {"opened": 2, "open": 2}  # its own two were never cut while they asked in time


def test_every_uid_together_holds_at_most_512_and_root_is_still_served(daemon: Daemon) -> None:
    daemon.start()
    hogs: list[Hog] = []
    try:
        for offset in range(16):  # 16 x 32 = 512: every connection an uid but root may hold
            hogs.append(Hog(daemon, HOG_UID + offset, PER_UID))
        hogs.append(Hog(daemon, HOG_UID + 16, 1))  # turned away, although under its own limit
        took, line = _health(daemon.socket)
        reports = [hog.report() for hog in hogs]
    finally:
        for hog in hogs:
            hog.kill()
    assert line is not None and line.startswith("HTTP/1.1 200"), f"root got no answer in {took:.0f}s"
    assert reports[:16] == [{"opened": PER_UID, "closed": PER_UID}] * 16
    assert reports[16] == {"opened": 1, "busy": 1}
