"""The caller of a daemon request, from the kernel (``SO_PEERCRED``): never from what the request claims."""

from __future__ import annotations

import pwd
import socket
import struct
from dataclasses import dataclass

from broker.core.policy import Requester

_UCRED = struct.Struct("3i")  # pid, uid, gid


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int

    def requester(self) -> Requester:
        try:
            name = pwd.getpwuid(self.uid).pw_name
        except KeyError:
            name = ""
        return Requester(name=name, uid=self.uid)


def peer_of(connection: socket.socket) -> Peer:
    raw = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return Peer(pid=pid, uid=uid, gid=gid)
