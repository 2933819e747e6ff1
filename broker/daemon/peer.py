"""The caller of a daemon request, from the kernel (``SO_PEERCRED``): never from what the request claims."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from broker.core.broker import Requester
from broker.host.peercred import peer_credentials, peer_groups


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int
    groups: frozenset[int] = frozenset()  # its supplementary groups (``SO_PEERGROUPS``)

    def requester(self) -> Requester:
        return Requester.of_uid(self.uid, frozenset((self.gid, *self.groups)))


def peer_of(connection: socket.socket) -> Peer:
    found = peer_credentials(connection)
    return Peer(pid=found.pid, uid=found.uid, gid=found.gid, groups=peer_groups(connection))
