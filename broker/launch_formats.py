"""What ``issue --format`` prints for launchers: env exports, docker/podman and bubblewrap arguments.

Only paths, addresses and the session id appear here; never a secret.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

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
