"""Who is at the other end of a Unix socket, from the kernel (``SO_PEERCRED``): never from what the peer claims.

The one reader of peer credentials: the daemon's callers and an exec's control socket both ask it.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

_UCRED = struct.Struct("3i")  # pid, uid, gid


@dataclass(frozen=True)
class PeerCredentials:
    pid: int
    uid: int
    gid: int


def peer_credentials(connection: socket.socket) -> PeerCredentials:
    pid, uid, gid = _UCRED.unpack(connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return PeerCredentials(pid=int(pid), uid=int(uid), gid=int(gid))
