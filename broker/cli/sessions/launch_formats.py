"""What ``issue --format`` prints for launchers: env exports, docker/podman and bubblewrap arguments.

Only paths, addresses and the session id appear here; never a secret. The
session file and stdout are written while ``issue`` can still roll back, so
their failures are reported, never swallowed.

A session the gateway serves (its document names ``proxy_url``) has its proxy
variables, secret included, in the file ``proxy/env`` of its directory: the
container formats pass it with ``--env-file`` (the engine reads it), ``env``
sources it (``set -a; . FILE; set +a``), so the secret never appears on
standard output or on a command line. A session with ``limits`` (the
manifest's ``sandbox.limits`` within its rules') gets the engine's
``--memory``, ``--cpus`` and ``--pids-limit`` in the container formats.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from broker.cli.render import issue_text
from broker.host.limits import Limits, cpus_text
from broker.vocab.errors import BadInput, OutputError
from broker.vocab.files import write_all


def show(document: dict[str, Any], values: Mapping[str, object]) -> None:
    """``broker issue``'s renderer: the session document as JSON, in a launcher's ``--format``, or as text; raising
    when stdout cannot take it (the caller rolls the session back)."""
    fmt = values.get("fmt")
    if values.get("as_json") or fmt is not None:
        emit(render(document, str(fmt or "json")))
    else:
        emit(issue_text(document))


def emit(text: str) -> None:
    """Print ``text`` and flush it now, raising when it cannot be delivered (stdout closed, a broken pipe).

    ``issue`` prints inside its rollback scope, so a launcher that never got
    the document never keeps a live session. After a failure, whatever stayed
    buffered goes to /dev/null: half a document must not leave at exit.
    """
    stream = sys.stdout
    if stream is None:
        raise OutputError("standard output is closed; nothing was printed")
    try:
        stream.write(text + "\n")
        stream.flush()
    except BaseException as exc:
        _discard(stream)
        if isinstance(exc, OSError | ValueError):
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise OutputError(f"cannot print to standard output ({reason})") from None
        raise


def _discard(stream: TextIO) -> None:
    try:
        fd = stream.fileno()
    except (OSError, ValueError):
        return
    null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def render(document: dict[str, Any], fmt: str) -> str:
    env: dict[str, str] = document["env"]
    proxy_env = f"{document['dir']}/proxy/env" if document.get("proxy_url") else None  # a gateway's session
    if fmt == "json":
        return json.dumps(document, indent=2)
    if fmt == "env":
        lines = [f"export {key}={shlex.quote(value)}" for key, value in env.items()]
        if proxy_env is not None:
            lines.append(f"set -a; . {shlex.quote(proxy_env)}; set +a")
        return "\n".join(lines)
    if fmt in ("docker", "podman"):
        args = [
            "--mount",
            f"type=bind,src={document['dir']},dst={document['mount_path']},readonly",
            "--label",
            f"broker.session={document['session']}",
        ]
        for key, value in env.items():
            args += ["--env", f"{key}={value}"]
        if proxy_env is not None:
            args += ["--env-file", proxy_env]
        return shlex.join(args + _limit_flags(Limits.from_json(document.get("limits"))))
    if fmt == "bwrap":
        args = ["--ro-bind", document["dir"], document["mount_path"]]
        for key, value in env.items():
            args += ["--setenv", key, value]
        return shlex.join(args)
    raise ValueError(f"unknown format {fmt}")


def _limit_flags(limits: Limits) -> list[str]:
    """The engine's flags for the session's ``sandbox.limits``: a container the launcher starts is held to what the
    policy allowed, as one ``broker exec`` starts is."""
    flags = [f"--memory={limits.memory}b"] if limits.memory is not None else []
    if limits.cpus is not None:
        flags.append(f"--cpus={cpus_text(limits.cpus)}")
    if limits.pids is not None:
        flags.append(f"--pids-limit={limits.pids}")
    return flags


class SessionFile:
    """``--session-file``: opened and checked before anything is minted, written once the session exists.

    Launchers often name a path in a shared directory such as /tmp. The file
    must be new, or a regular file of the broker's user with one link, and is
    never reached through a symbolic link: as root, following a planted link
    or writing into a hard link would overwrite whatever it points at. A FIFO
    is refused without waiting for a reader (``O_NONBLOCK``).
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def open(cls, path: Path) -> SessionFile:
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise BadInput(f"--session-file {path} is a symbolic link; refusing to write through it") from None
            if exc.errno == errno.ENXIO:  # a FIFO nobody reads
                raise BadInput(f"--session-file {path} is not a regular file") from None
            raise BadInput(f"--session-file {path}: {exc.strerror}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise BadInput(f"--session-file {path} is not a regular file")
            if info.st_uid != os.geteuid():
                raise BadInput(f"--session-file {path} belongs to another user")
            if info.st_nlink != 1:
                raise BadInput(f"--session-file {path} has other hard links; refusing to write into it")
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    def write(self, session_id: str) -> None:
        data = f"{session_id}\n".encode()
        try:
            os.ftruncate(self._fd, 0)
            write_all(self._fd, data, offset=0)
        except OSError as exc:
            raise BadInput(f"--session-file {self.path}: {exc.strerror}") from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def write_session_file(path: Path, session_id: str) -> None:
    """Open, check and write ``path`` in one go."""
    session_file = SessionFile.open(path)
    try:
        session_file.write(session_id)
    finally:
        session_file.close()
