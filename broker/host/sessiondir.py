"""Per-session credential directories on tmpfs (injection).

``runtime_dir/<session>`` is a fresh tmpfs of its own when the broker can
mount; otherwise ``runtime_dir`` itself must be tmpfs. Everything is done
through directory file descriptors with ``O_NOFOLLOW``: files are created
with ``O_EXCL`` and their final mode (0400) from the start, owned by the
sandbox uid/gid, and renamed into place so a reader never sees half a token.
Directories end up 0500.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from broker.host import mounts
from broker.vocab.errors import RuntimeDirError
from broker.vocab.files import read_bounded, write_private_file
from broker.vocab.logs import event
from broker.vocab.secret import Secret

SESSION_TMPFS_SIZE = "4096k"  # as /proc/self/mountinfo shows it, so sweep can recognise the broker's mounts
SESSION_TMPFS_MODE = 0o700
SESSION_TMPFS_FLAGS = frozenset({"nosuid", "nodev", "noexec"})
MAX_SESSION_DOCUMENT_BYTES = 64 * 1024
DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
CHILDREN = "children"  # a delegated session's directory: <parent's>/children/<child>, inside the parent's tmpfs
SOCKET_NAME = "broker.sock"  # a delegating session's socket, in its directory
CHILDREN_MODE = 0o711  # the broker's own: the sandbox passes through to its children's directories, lists nothing
LOG = logging.getLogger("broker.sessiondir")


@dataclass(frozen=True)
class RuntimeDir:
    path: Path
    mount_per_session: bool


def prepare_runtime_dir(path: Path, mount_mode: str) -> RuntimeDir:
    """Create or check ``runtime_dir``; decide whether sessions get their own tmpfs."""
    if not path.is_absolute():
        raise RuntimeDirError(f"runtime_dir {path} must be an absolute path")
    try:
        if not os.path.lexists(path):
            os.makedirs(path.parent, mode=0o755, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o711)
        info = os.lstat(path)
    except OSError as exc:
        raise RuntimeDirError(f"runtime_dir {path}: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise RuntimeDirError(f"runtime_dir {path} is a symbolic link")
    if not stat.S_ISDIR(info.st_mode):
        raise RuntimeDirError(f"runtime_dir {path} is not a directory")
    if info.st_uid != os.geteuid():
        raise RuntimeDirError(f"runtime_dir {path} is not owned by the broker's user (uid {os.geteuid()})")
    if info.st_mode & 0o022:
        raise RuntimeDirError(f"runtime_dir {path} is writable by group or others; chmod 711 it")
    _check_parents(path)
    mount = mount_mode == "always" or (mount_mode == "auto" and mounts.can_mount())
    if mount and not mounts.can_mount():
        raise RuntimeDirError('mount_tmpfs = "always" but the broker cannot mount (it lacks CAP_SYS_ADMIN)')
    if not mount:
        try:
            on_tmpfs = mounts.is_tmpfs(path)
        except OSError as exc:
            raise RuntimeDirError(f"runtime_dir {path}: {exc.strerror}") from None
        if not on_tmpfs:
            raise RuntimeDirError(
                f"runtime_dir {path} is not on tmpfs and the broker cannot mount one; secrets would reach a disk"
            )
    return RuntimeDir(path=path, mount_per_session=mount)


def _check_parents(path: Path) -> None:
    """No parent of runtime_dir may be writable by others (unless sticky and root-owned)."""
    for parent in path.parents:
        info = os.lstat(parent)
        if stat.S_ISLNK(info.st_mode):
            raise RuntimeDirError(f"runtime_dir parent {parent} is a symbolic link")
        writable = info.st_mode & 0o002
        if writable and not (info.st_mode & stat.S_ISVTX and info.st_uid == 0):
            raise RuntimeDirError(f"runtime_dir parent {parent} is world-writable")


@contextlib.contextmanager
def open_dir(path: str | Path, dir_fd: int | None = None) -> Iterator[int]:
    fd = os.open(path, DIR_OPEN, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def open_children(runtime_dir: Path, ancestors: tuple[str, ...], *, make: bool = False) -> Iterator[int]:
    """``runtime_dir/A/children/B/children/...``: the ``children`` directory of the last of ``ancestors``.

    Opened one component at a time through directory descriptors, none of
    them a symbolic link (a parent's directory belongs to its sandbox user, who
    could swap what is in it), each ``children`` checked to be the broker's own
    (so nothing is ever written into a directory a sandbox made). ``make``
    creates the last ``children`` when it is missing.
    """
    with contextlib.ExitStack() as stack:
        fd = stack.enter_context(open_dir(runtime_dir))
        for index, name in enumerate(ancestors):
            fd = stack.enter_context(open_dir(name, dir_fd=fd))
            if make and index == len(ancestors) - 1:
                _make_children(fd)
            fd = stack.enter_context(open_dir(CHILDREN, dir_fd=fd))
            info = os.fstat(fd)
            if info.st_uid != os.geteuid() or info.st_mode & 0o022:
                raise RuntimeDirError(f"{CHILDREN} of session {name} is not the broker's own; refusing to use it")
        yield fd


def _make_children(parent: int) -> None:
    """``children`` in a sealed directory (0500): root writes there anyway; another broker user opens it a moment."""
    if os.geteuid() != 0:
        os.fchmod(parent, 0o700)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(CHILDREN, CHILDREN_MODE, dir_fd=parent)
    finally:
        if os.geteuid() != 0:
            os.fchmod(parent, 0o500)


class SessionDirectory:
    """One session's directory: create, write files, seal, wipe.

    A delegated session's (``ancestors``: the sessions above it, the topmost
    first) is ``<parent's directory>/children/<id>``, inside its topmost
    ancestor's tmpfs, so the sandbox that holds the parent's directory sees it.
    """

    def __init__(self, runtime: RuntimeDir, session_id: str, uid: int, gid: int, ancestors: tuple[str, ...] = ()):
        self.runtime = runtime
        self.session_id = session_id
        self.ancestors = ancestors
        self.path = runtime.path.joinpath(*(f"{a}/{CHILDREN}" for a in ancestors), session_id)
        self.uid = uid
        self.gid = gid

    @contextlib.contextmanager
    def _top(self) -> Iterator[int]:
        """The session's own directory, opened without following a link on the way."""
        if not self.ancestors:
            with open_dir(self.path) as top:
                yield top
            return
        with open_children(self.runtime.path, self.ancestors) as children, open_dir(self.session_id, children) as top:
            yield top

    def create(self) -> None:
        if self.ancestors:
            with open_children(self.runtime.path, self.ancestors, make=True) as children:
                try:
                    os.mkdir(self.session_id, 0o700, dir_fd=children)
                except FileExistsError:
                    raise RuntimeDirError(f"session directory {self.path} already exists") from None
            return
        with open_dir(self.runtime.path) as parent:
            try:
                os.mkdir(self.session_id, 0o700, dir_fd=parent)
            except FileExistsError:
                raise RuntimeDirError(f"session directory {self.path} already exists") from None
        if self.runtime.mount_per_session:
            try:
                accepted = mounts.mount_tmpfs(
                    self.path, size=SESSION_TMPFS_SIZE, mode=SESSION_TMPFS_MODE, uid=os.geteuid(), gid=os.getegid()
                )
            except OSError as exc:
                os.rmdir(self.path)
                raise RuntimeDirError(f"cannot mount a tmpfs at {self.path}: {exc.strerror}") from None
            noswap = mounts.NOSWAP in accepted
            message = "session tmpfs mounted" if noswap else "session tmpfs mounted without noswap (kernel < 6.4)"
            event(LOG, message, session=self.session_id, noswap=noswap)

    def write_credential(self, name: str, files: Mapping[str, Secret | str]) -> list[str]:
        """Write ``name/<file>`` for every file; returns the relative paths written."""
        written = []
        with self._top() as top:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=top)
            with open_dir(name, dir_fd=top) as sub:
                for file_name, content in files.items():
                    data = content.reveal_bytes() if isinstance(content, Secret) else content.encode()
                    self._write_atomic(sub, file_name, data)
                    written.append(f"{name}/{file_name}")
        return written

    def write_file(self, file_name: str, data: bytes) -> None:
        with self._top() as top:
            self._write_atomic(top, file_name, data)

    def bind_socket(self, owner: tuple[int, int] | None) -> socket.socket:
        """``broker.sock`` (a delegating session's), mode 0600, owned by ``owner``: made before ``seal``, while the
        directory is still the broker's alone, so nothing in it can be swapped under the chmod and chown."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            with self._top() as top:
                listener.bind(f"/proc/self/fd/{top}/{SOCKET_NAME}")  # any length of runtime_dir
                if not stat.S_ISSOCK(os.stat(SOCKET_NAME, dir_fd=top, follow_symlinks=False).st_mode):
                    raise RuntimeDirError(f"{SOCKET_NAME} is not the socket the broker bound")
                os.chmod(SOCKET_NAME, 0o600, dir_fd=top)
                if owner is not None and os.geteuid() == 0:
                    os.chown(SOCKET_NAME, *owner, dir_fd=top, follow_symlinks=False)
            listener.listen(16)
        except OSError as exc:
            listener.close()
            raise RuntimeDirError(f"session socket {self.path / SOCKET_NAME}: {exc.strerror or exc}") from None
        except BaseException:
            listener.close()
            raise
        return listener

    def _write_atomic(self, dir_fd: int, file_name: str, data: bytes) -> None:
        owner = (self.uid, self.gid) if os.geteuid() == 0 else None
        write_private_file(dir_fd, file_name, data, mode=0o400, owner=owner)

    def seal(self) -> None:
        """Final modes and owners: directories 0500, owned by the sandbox uid/gid."""
        with self._top() as top:
            for entry in os.scandir(top):
                if entry.is_dir(follow_symlinks=False):
                    with open_dir(entry.name, dir_fd=top) as sub:
                        self._own(sub, 0o500)
            self._own(top, 0o500)

    def _own(self, fd: int, mode: int) -> None:
        if os.geteuid() == 0:
            os.fchown(fd, self.uid, self.gid)
        os.fchmod(fd, mode)

    def unseal(self) -> None:
        """Make the directories writable by the broker again (for replacing files)."""
        with self._top() as top:
            os.fchmod(top, 0o700)
            for entry in os.scandir(top):
                if entry.is_dir(follow_symlinks=False):
                    with open_dir(entry.name, dir_fd=top) as sub:
                        os.fchmod(sub, 0o700)

    def remove(self) -> bool:
        """Wipe and unmount; True when nothing is left. Safe to call again."""
        if self.ancestors:
            return remove_child_path(self.runtime.path, self.ancestors, self.session_id)
        return remove_session_path(self.runtime.path, self.session_id)


def is_broker_session_dir(runtime_dir: Path, name: str) -> bool:
    """Whether ``runtime_dir/name`` is provably a session directory this broker made.

    Either the tmpfs the broker mounts for a session (mounted right there, with
    the broker's size, mode and flags), or a directory that is no mount point
    and holds a ``session.json`` naming it. Anything else (another mount, a
    file, a symbolic link, a directory of someone else's) is not.
    """
    entry = mounts.mount_entry(runtime_dir / name)
    if entry is not None:
        return (
            entry.fstype == "tmpfs"
            and entry.source == "tmpfs"
            and entry.options >= SESSION_TMPFS_FLAGS
            and entry.super_options >= {f"size={SESSION_TMPFS_SIZE}", f"mode={SESSION_TMPFS_MODE:o}"}
        )
    try:
        document = json.loads(_read_session_document(runtime_dir, name))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(document, dict) and document.get("session") == name


def _read_session_document(runtime_dir: Path, name: str) -> bytes:
    """``name/session.json``, a small regular file, read without following a symbolic link anywhere."""
    with open_dir(runtime_dir) as parent, open_dir(name, dir_fd=parent) as top:
        data, _ = read_bounded("session.json", MAX_SESSION_DOCUMENT_BYTES, dir_fd=top, follow_symlinks=False)
    return data


def remove_session_path(runtime_dir: Path, name: str) -> bool:
    path = runtime_dir / name
    if not os.path.lexists(path):
        return True
    if mounts.is_mount_point(path):
        _wipe_tree(runtime_dir, name)
        mounts.unmount(path)
    _wipe_tree(runtime_dir, name)
    with open_dir(runtime_dir) as parent:
        try:
            os.rmdir(name, dir_fd=parent)
        except FileNotFoundError:
            pass
        except NotADirectoryError:
            os.unlink(name, dir_fd=parent)
    return not os.path.lexists(path)


def remove_child_path(runtime_dir: Path, ancestors: tuple[str, ...], name: str) -> bool:
    """Wipe a delegated session's directory; True when nothing is left (its parent's gone already counts)."""
    try:
        with open_children(runtime_dir, ancestors) as children:
            try:
                info = os.stat(name, dir_fd=children, follow_symlinks=False)
            except FileNotFoundError:
                return True
            if stat.S_ISDIR(info.st_mode):
                _empty_dir(children, name)
                os.rmdir(name, dir_fd=children)
            else:
                os.unlink(name, dir_fd=children)
            return True
    except (FileNotFoundError, NotADirectoryError):
        return True  # the parent's directory (its tmpfs) is gone, and this one with it


def _wipe_tree(parent_path: Path, name: str) -> None:
    """Delete everything below ``parent/name`` without following symbolic links."""
    with open_dir(parent_path) as parent:
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(info.st_mode):
            os.unlink(name, dir_fd=parent)
            return
        _empty_dir(parent, name)


def _empty_dir(parent: int, name: str) -> None:
    with open_dir(name, dir_fd=parent) as fd:
        os.fchmod(fd, 0o700)
        for entry in list(os.scandir(fd)):
            if entry.is_dir(follow_symlinks=False):
                _empty_dir(fd, entry.name)
                os.rmdir(entry.name, dir_fd=fd)
            else:
                os.unlink(entry.name, dir_fd=fd)
