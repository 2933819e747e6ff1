"""Who is at the other end of a Unix socket, from the kernel (``SO_PEERCRED``, ``SO_PEERGROUPS``): never from what
the peer claims.

The one reader of peer credentials: the daemon's callers and an exec's control socket both ask it.
"""

from __future__ import annotations

import errno
import socket
import struct
from dataclasses import dataclass

_UCRED = struct.Struct("3i")  # pid, uid, gid
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux 4.13+; the constant is missing from older Pythons
MAX_GROUPS = 65536  # NGROUPS_MAX


@dataclass(frozen=True)
class PeerCredentials:
    pid: int
    uid: int
    gid: int


def peer_credentials(connection: socket.socket) -> PeerCredentials:
    pid, uid, gid = _UCRED.unpack(connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return PeerCredentials(pid=int(pid), uid=int(uid), gid=int(gid))


def peer_groups(connection: socket.socket) -> frozenset[int]:
    """The peer's supplementary groups as the kernel recorded them when it connected (``SO_PEERGROUPS``)."""
    size = 64 * 4
    while True:
        try:
            data = connection.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, size)
        except OSError as exc:
            if exc.errno == errno.ERANGE and size < MAX_GROUPS * 4:
                size *= 4  # more groups than the buffer holds
                continue
            raise
        count = len(data) // 4
        return frozenset(struct.unpack(f"{count}I", data[: count * 4]))
