"""Where a session's egress proxy listens: ``runtime_dir/.egress/<session>/proxy.sock``, made where no peer can write.

A root broker hands this socket to other users (the sandbox user, a daemon
client that runs its own bubblewrap), so nothing here is done by a path that
anyone but the broker can change. ``runtime_dir/.egress`` is the broker's own
(mode 0711; a tmpfs of its own when the broker mounts, so a sandbox's
``/proc/self/mountinfo`` shows the socket as ``/<session>/proxy.sock`` and
names nothing of the host). Each session's directory in it is the broker's,
0700 while the socket is made: the socket is bound there, given mode 0600
and its owner through the directory's descriptor (``fchownat`` without
following a link), and only then, for a launcher that is not root, the
directory is opened for passing through (0711). A peer can never rename, link
or swap anything in these directories, so no ``RENAME_EXCHANGE`` or symbolic
link turns a chmod or chown of the broker's onto a file of the host's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
from pathlib import Path

from broker.host import mounts
from broker.host.sessiondir import RuntimeDir, open_dir
from broker.vocab.errors import RuntimeDirError
from broker.vocab.session_ids import check_session_id, is_session_id

EGRESS_DIR = ".egress"
SOCKET_NAME = "proxy.sock"
EGRESS_TMPFS_SIZE = "1m"  # sockets and directories only: no data is ever written there
ROOT_MODE = 0o711  # passable, not listable: a launcher reaches its own socket by its name
BACKLOG = 128


def egress_root(runtime: RuntimeDir) -> Path:
    """``runtime_dir/.egress``: created (a tmpfs when the broker mounts) and checked to be the broker's, 0711."""
    path = runtime.path / EGRESS_DIR
    with open_dir(runtime.path) as parent:
        with contextlib.suppress(FileExistsError):
            os.mkdir(EGRESS_DIR, ROOT_MODE, dir_fd=parent)
        _check_own(parent, EGRESS_DIR, path)
        if runtime.mount_per_session and not mounts.is_mount_point(path):
            # One mount, whoever comes first: a second one stacked on it would hide the sockets made in the first.
            fcntl.flock(parent, fcntl.LOCK_EX)
            try:
                if not mounts.is_mount_point(path):
                    mounts.mount_tmpfs(path, size=EGRESS_TMPFS_SIZE, mode=ROOT_MODE, uid=os.geteuid(), gid=os.getegid())
            except OSError as exc:
                raise RuntimeDirError(f"cannot mount a tmpfs at {path}: {exc.strerror}") from None
            finally:
                fcntl.flock(parent, fcntl.LOCK_UN)
        _check_own(parent, EGRESS_DIR, path)
        with open_dir(EGRESS_DIR, dir_fd=parent) as top:
            os.fchmod(top, ROOT_MODE)
    return path


class EgressSocket:
    """A listening Unix socket at ``root/name/proxy.sock`` owned by ``owner`` (uid, gid), mode 0600.

    ``passable``: a launcher that is not root binds it into its own sandbox
    and must pass through ``root/name`` (0711); otherwise only root or the
    broker's user reach it (0700) and bubblewrap, started by them, binds it in.
    """

    def __init__(self, root: Path, name: str, owner: tuple[int, int] | None, *, passable: bool) -> None:
        self.name = check_session_id(name, "session id")
        self.root = root
        self.path = root / self.name / SOCKET_NAME
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        made = False
        try:
            with open_dir(root) as top:
                os.mkdir(self.name, 0o700, dir_fd=top)
                made = True
                _check_own(top, self.name, root / self.name)
                with open_dir(self.name, dir_fd=top) as directory:
                    os.fchmod(directory, 0o700)  # whatever the umask: nobody but the broker while the socket is made
                    self.listener.bind(f"/proc/self/fd/{directory}/{SOCKET_NAME}")  # any length of runtime_dir
                    _settle(directory, owner)
                    self.listener.listen(BACKLOG)
                    if passable:
                        os.fchmod(directory, ROOT_MODE)
        except OSError as exc:
            self.listener.close()
            if made:
                self.remove()
            raise RuntimeDirError(f"egress socket {self.path}: {exc.strerror or exc}") from None

    def remove(self) -> None:
        """Unlink the socket and its directory (both the broker's; nothing in them is followed). Safe to call again."""
        _remove(self.root, self.name)


def stale_sessions(root: Path) -> list[str]:
    """The session directories in ``root`` (``runtime_dir/.egress``); none when it does not exist."""
    try:
        names = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(name for name in names if is_session_id(name))


def remove_session_socket(root: Path, name: str) -> None:
    """What a session that ended without removing its socket (a killed broker) left in ``root``."""
    _remove(root, check_session_id(name, "session id"))


def _remove(root: Path, name: str) -> None:
    with contextlib.suppress(FileNotFoundError, NotADirectoryError), open_dir(root) as top:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError), open_dir(name, dir_fd=top) as directory:
            for entry in os.listdir(directory):
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    os.unlink(entry, dir_fd=directory)
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=top)


def _settle(directory: int, owner: tuple[int, int] | None) -> None:
    """The socket's final mode and owner, set inside a directory only the broker can write."""
    info = os.stat(SOCKET_NAME, dir_fd=directory, follow_symlinks=False)
    if not stat.S_ISSOCK(info.st_mode):
        raise RuntimeDirError(f"{SOCKET_NAME} is not the socket the broker bound")
    os.chmod(SOCKET_NAME, 0o600, dir_fd=directory)  # not a link (checked; nobody else can write here)
    if owner is not None:
        os.chown(SOCKET_NAME, *owner, dir_fd=directory, follow_symlinks=False)


def _check_own(parent: int, name: str, shown: Path) -> None:
    info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if not stat.S_ISDIR(info.st_mode):
        raise RuntimeDirError(f"{shown} is not a directory (a symbolic link?); remove it")
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise RuntimeDirError(f"{shown} must be the broker's own (owner uid {os.geteuid()}, not group/other writable)")
