"""Who may read ``GET /metrics`` on the daemon's socket: root and the daemon's own uid, nobody else.

The socket is open to the launchers of a host (its group), and each of them
may act only on its own sessions; the metrics describe the whole host (in a
fleet, the whole store: every provider's failures, every role's deny
budget), so another peer's scrape is refused like any action beyond its own.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.fixtures.daemon import SOCKET_GID, WAIT, Daemon, daemon
from tests.fixtures.openbao import OpenBao

__all__ = ["daemon"]  # a fixture
pytestmark = pytest.mark.server

PEER_UID = 59123  # in the socket's group, no account


def test_only_root_and_the_daemons_uid_scrape_through_the_socket(daemon: Daemon, openbao: OpenBao) -> None:
    daemon.start()
    program = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"s.connect({str(daemon.socket)!r})\n"
        "s.sendall(b'GET /metrics HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n')\n"
        "data = b''\n"
        "while chunk := s.recv(65536):\n"
        "    data += chunk\n"
        "sys.stdout.write(data.decode())\n"
    )
    peer = subprocess.run(
        ["setpriv", f"--reuid={PEER_UID}", f"--regid={SOCKET_GID}", "--clear-groups", sys.executable, "-c", program],
        capture_output=True, timeout=WAIT, check=True, cwd="/",
    )  # fmt: skip
    head, _, body = peer.stdout.partition(b"\r\n\r\n")
    assert head.split()[1] == b"403"
    assert json.loads(body) == {"error": f"uid:{PEER_UID} may not read the metrics: only root may, through the daemon",
                                "exit_code": 3}  # fmt: skip
