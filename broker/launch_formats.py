"""What ``issue --format`` prints for launchers: env exports, docker/podman and bubblewrap arguments.

Only paths, addresses and the session id appear here; never a secret.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import stat
from pathlib import Path
from typing import Any

from broker.errors import BadInput

FORMATS = ("json", "env", "docker", "podman", "bwrap")


def render(document: dict[str, Any], fmt: str) -> str:
    env: dict[str, str] = document["env"]
    if fmt == "json":
        return json.dumps(document, indent=2)
    if fmt == "env":
        return "\n".join(f"export {key}={shlex.quote(value)}" for key, value in env.items())
    if fmt in ("docker", "podman"):
        args = [
            "--mount",
            f"type=bind,src={document['dir']},dst={document['mount_path']},readonly",
            "--label",
            f"broker.session={document['session']}",
        ]
        for key, value in env.items():
            args += ["--env", f"{key}={value}"]
        return shlex.join(args)
    if fmt == "bwrap":
        args = ["--ro-bind", document["dir"], document["mount_path"]]
        for key, value in env.items():
            args += ["--setenv", key, value]
        return shlex.join(args)
    raise ValueError(f"unknown format {fmt}")


def write_session_file(path: Path, session_id: str) -> None:
    """Write the session id for a launcher, never through a planted symlink or into someone else's file.

    Launchers often name a path in a shared directory such as /tmp; as root, following a link
    planted there would overwrite whatever it points at.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BadInput(f"--session-file {path} is a symbolic link; refusing to write through it") from None
        raise BadInput(f"--session-file {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise BadInput(f"--session-file {path} is not a regular file of the broker's user")
        os.ftruncate(fd, 0)
        os.write(fd, f"{session_id}\n".encode())
    finally:
        os.close(fd)
