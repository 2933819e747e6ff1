"""``broker doctor``'s checks of the daemon: its socket is private to its group, and it answers."""

from __future__ import annotations

import os
import stat

from broker.core.inputs.config import Config
from broker.daemon.server import SOCKET_MODE, socket_gid
from broker.vocab.checks import Check
from broker.vocab.errors import BrokerError


def check_daemon(config: Config) -> list[Check]:
    """Nothing without ``[daemon]``; else the socket's mode and group, then ``GET /v1/health`` through it."""
    settings = config.daemon
    if settings is None:
        return []
    path = settings.socket
    try:
        info = os.stat(path)
    except OSError as exc:
        return [Check("daemon", False, f"{path}: {exc.strerror}", "start it: systemctl start broker.socket")]
    if not stat.S_ISSOCK(info.st_mode):
        return [Check("daemon", False, f"{path} is not a socket", "remove it, then start broker.socket")]
    mode = stat.S_IMODE(info.st_mode)
    try:
        gid = socket_gid(settings.socket_group)
    except BrokerError as exc:
        return [Check("daemon", False, exc.message, "set [daemon] socket_group to an existing group")]
    if mode & ~SOCKET_MODE or info.st_gid != gid:
        detail = f"{path} is mode {mode:04o}, group {info.st_gid}: every local user could ask for credentials"
        return [Check("daemon", False, detail, f"chmod 0660 and chgrp {gid} it (SocketMode/SocketGroup)")]
    from broker.daemon.transport import call

    try:
        answer = call(str(path), "GET", "/v1/health")
    except BrokerError as exc:
        return [Check("daemon", False, exc.message, "start it: systemctl start broker.service")]
    version = answer.document.get("version") if isinstance(answer.document, dict) else None
    if answer.status != 200:
        return [Check("daemon", False, f"{path} answered {answer.status}", "see journalctl -u broker.service")]
    return [Check("daemon", True, f"{path} (mode {mode:04o}, group {info.st_gid}) answers, broker {version}")]
