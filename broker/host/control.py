"""A running ``exec``'s control socket: an outside ``broker revoke`` asks it to stop serving its session at once.

``exec`` holds its session's lock until the command ends, so a revoke from
outside would otherwise wait for the command, while the session's proxy
keeps putting the secret in. The exec process listens on
``state_dir/control/SESSION.sock`` (the directory 0700, the socket 0600; the
name is a checked session id, never anything else). Only root and the
broker's own uid may ask (the kernel's ``SO_PEERCRED``, whatever the file
modes say); anyone else is answered ``refused`` and nothing happens. The
exchange is one line each way: ``revoke`` and, once the session's proxy
refuses, ``stopped``. Paths are reached through a directory descriptor, so a
long ``state_dir`` never runs into the 108-byte limit of a socket address.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from broker.host.peercred import peer_credentials
from broker.vocab.session_ids import check_session_id

REQUEST, STOPPED, REFUSED = b"revoke\n", b"stopped\n", b"refused\n"
ANSWER_TIMEOUT = 30.0


def control_dir(state_dir: Path) -> Path:
    path = state_dir / "control"
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _socket_name(session_id: str) -> str:
    return f"{check_session_id(session_id, 'session id')}.sock"


@contextlib.contextmanager
def _reachable(directory: Path, name: str) -> Iterator[str]:
    """A short address for ``directory/name``: through a descriptor of the directory (no symbolic link followed)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{name}"
    finally:
        os.close(fd)


def peer_uid(connection: socket.socket) -> int:
    return peer_credentials(connection).uid


def may_control(uid: int) -> bool:
    return uid in (0, os.geteuid())


class ControlSocket:
    """Listens for ``revoke`` for one session and calls ``on_revoke`` (once per request) for an allowed peer."""

    def __init__(self, state_dir: Path, session_id: str, on_revoke: Callable[[], None]) -> None:
        self._directory = control_dir(state_dir)
        self._name = _socket_name(session_id)
        self._on_revoke = on_revoke
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with _reachable(self._directory, self._name) as address:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(address)  # a socket a killed exec of this session left behind
            self._listener.bind(address)
            os.chmod(address, 0o600)
        self._listener.listen(8)
        self._thread = threading.Thread(target=self._serve, name="exec-control", daemon=True)
        self._thread.start()

    @property
    def path(self) -> Path:
        return self._directory / self._name

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # closed
            with connection, contextlib.suppress(OSError):
                connection.settimeout(ANSWER_TIMEOUT)
                if not may_control(peer_uid(connection)):
                    connection.sendall(REFUSED)
                    continue
                if connection.recv(len(REQUEST)) == REQUEST:
                    self._on_revoke()
                    connection.sendall(STOPPED)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=ANSWER_TIMEOUT)
        with contextlib.suppress(OSError), _reachable(self._directory, self._name) as address:
            os.unlink(address)

    def __enter__(self) -> ControlSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ask_to_revoke(state_dir: Path, session_id: str) -> bool:
    """Ask the ``exec`` running ``session_id`` to stop serving it; False when none listens (or it refused)."""
    name = _socket_name(session_id)
    directory = state_dir / "control"
    try:
        with _reachable(directory, name) as address, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(ANSWER_TIMEOUT)
            client.connect(address)
            client.sendall(REQUEST)
            return client.recv(len(STOPPED)) == STOPPED
    except OSError:
        return False
