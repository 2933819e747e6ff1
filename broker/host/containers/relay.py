"""The network namespace of an allow-listed container: loopback alone, and the forwarder to the proxy serving it.

Why this way: the container must reach the session's proxy and nothing
else, and the proxy listens on a Unix socket on the host. So the broker makes
a network namespace of its own (``unshare --net``, holding only ``lo``) with
its forwarder (``broker.egress.proxy.forwarder``, the one bubblewrap uses) as
the namespace's one process: a host process, so nothing is installed into
the image and no socket of the host is bound into the container. It listens
on ``127.0.0.1:3128`` there and carries each connection to ``proxy.sock``
(opened by root, then served as the sandbox user). Podman joins the container
to that namespace (``--network ns:/proc/PID/ns/net``): the container's only
interface is that loopback, its only way out the forwarder. No bridge,
firewall rule or engine network is made, so there is nothing to leak or clean
up but the process, which the launcher stops when the container has ended and
which dies with its launcher.
"""

from __future__ import annotations

import contextlib
import select
import shutil
import subprocess
from collections.abc import Sequence

from broker.vocab.errors import BadInput

UNSHARE = "/usr/bin/unshare"
READY_WITHIN = 10.0


def unshare_path() -> str | None:
    return shutil.which("unshare", path="/usr/bin:/bin") or None


class Relay:
    """The forwarder running in a network namespace of its own; ``namespace`` is what the engine joins."""

    def __init__(self, forwarder: Sequence[str]) -> None:
        unshare = unshare_path()
        if unshare is None:
            raise BadInput("unshare is missing (Debian/Ubuntu: apt-get install util-linux)")
        self.process = subprocess.Popen(
            [unshare, "--net", "--", *forwarder],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"},
            close_fds=True,
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], READY_WITHIN)
        line = self.process.stdout.readline() if ready else b""
        self.process.stdout.close()
        if line != b"ready\n":
            self.stop()
            raise BadInput("the container's network namespace could not be made (unshare --net and its forwarder)")

    @property
    def namespace(self) -> str:
        return f"/proc/{self.process.pid}/ns/net"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(OSError):
            if self.process.stdout is not None:
                self.process.stdout.close()
