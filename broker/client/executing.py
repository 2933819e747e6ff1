"""``broker exec`` through the daemon: the daemon issues and holds the session, this process runs the sandbox.

One connection carries it all: ``POST /v1/exec`` (the manifest, read here
with the launcher's own rights, and the options) answers with the session
document, the command's environment and, with an allowlist, the egress
proxy's Unix socket; ``POST /v1/sessions/{id}/hold`` then stays open while
the command runs. When this process ends in any way its connection closes
and the daemon revokes the session; when the command ends normally this side
stops writing and reads the revoke report. When the session ends under the
command (revoked from outside, expired, the daemon stopped or gone) the hold
answers early: the proxy refuses already, and the command gets SIGTERM, then
SIGKILL after a grace period, as direct ``exec`` stops it. The sandbox is the same bubblewrap
command line as direct ``exec`` (``broker.host.sandbox``), with the
forwarder in front of the command when there is a proxy, or the same
container (``broker.host.containers``: the engine's options are the daemon's
config, handed over in its answer), in the session's cgroup when the
session has limits (the daemon checked this host can enforce them).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.client import approving
from broker.client.answers import checked
from broker.client.asking import manifest, render, session_id
from broker.commands.declaring import Command
from broker.daemon.transport import Answer, Connection
from broker.egress.proxy.bridge import forwarder_argv, relay_argv
from broker.host.containers.engine import EngineOptions
from broker.host.limits import Limits, limit_notes
from broker.host.sandbox import EGRESS_SOCKET, check_sandbox_available
from broker.host.spawning import Ended, Launch, launch, stop
from broker.vocab.durations import wait_seconds
from broker.vocab.errors import BrokerError, UsageError

PASSED_TO_DAEMON = ("PATH", "LANG", "TERM")  # what direct exec takes from its own environment


def run_exec(table_entry: Command, args: dict[str, Any], socket: str) -> int:
    """The command's exit status, as direct ``exec`` returns it (``args``: the command table's exec values)."""
    document = manifest(str(args["task"]))  # read with the launcher's own rights, first, as ever
    command = list(args["command"])
    if not command:
        raise UsageError("exec needs a command: broker exec --task FILE -- CMD ARGS...")
    check_sandbox_available(args["sandbox"], args["network"], args["image"])  # before anything is minted, as direct
    workspace = str(Path(args["workspace"]).resolve()) if args["workspace"] else None
    body = {
        "manifest": document,
        "sandbox": args["sandbox"],
        "network": args["network"],
        "image": args["image"],
        "workspace": workspace or (os.getcwd() if args["sandbox"] == "none" else None),
        "parent_env": {name: os.environ[name] for name in PASSED_TO_DAEMON if name in os.environ},
    }
    wait = wait_seconds(args["wait"], bool(args["no_wait"]))
    with contextlib.ExitStack() as stack:
        connection = stack.enter_context(Connection(socket))
        answer = connection.request("POST", "/v1/exec", body)
        if answer.status == 202:  # nothing minted: a person decides first
            request = _await(socket, answer, wait)
            connection = stack.enter_context(Connection(socket))  # the first one idled past the daemon's limit
            answer = connection.request("POST", "/v1/exec", {**body, "resume": request})
        started = checked(answer)
        session = str(started.document["session"]["session"])
        holder = _Holder(connection, session)
        ended = _run(started.document, command, args, workspace, holder.attach)
        report = holder.finish()
    revoked = None if report is None else not report.exit_code
    limits = Limits.from_json(started.document["session"].get("limits"))
    notes = list(limit_notes(ended.past, ended.status, limits))
    render(table_entry, {"session": session, "revoked": revoked, "notes": notes}, args)
    return ended.status


def _await(socket: str, answer: Answer, wait: float | None) -> str:
    """The exec's session needs an approval: wait for it (exit 8 with ``--no-wait`` or when the wait ends first);
    the request id, checked, once approved."""
    waiting = approving.pending(answer)
    approving.announce(socket, waiting, wait, False)
    if wait == 0:
        raise waiting
    request = session_id(waiting.request, "request id")
    approving.settle(socket, request, wait)
    return request


class _Holder:
    """The hold request and its answer, read in a thread: it comes when the session ends, whoever ends it."""

    def __init__(self, connection: Connection, session: str) -> None:
        self.connection = connection
        self.answer: Answer | None = None
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._ended = False  # the hold answered (or broke): the session is over
        self._finishing = False  # the command ended by itself: nothing to stop
        connection.send("POST", f"/v1/sessions/{session}/hold")
        self._thread = threading.Thread(target=self._read, name="hold", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            self.answer = self.connection.answer()
        except BrokerError:
            self.answer = None
        with self._lock:
            self._ended = True
            child = None if self._finishing else self._child
        stop(child)

    def attach(self, child: subprocess.Popen[bytes]) -> None:
        """The command runs: stopped at once if its session has already ended."""
        with self._lock:
            self._child = child
            ended = self._ended
        if ended:
            stop(child)

    def finish(self) -> Answer | None:
        """The command ended: let the daemon revoke and read its report (None when the daemon is gone)."""
        with self._lock:
            self._finishing = True
        self.connection.done_sending()
        self._thread.join()
        return self.answer


def _run(
    started: dict[str, Any],
    command: list[str],
    args: dict[str, Any],
    workspace: str | None,
    attach: Callable[[subprocess.Popen[bytes]], None],
) -> Ended:
    document = started["session"]
    socket, sandbox = started["egress_socket"], started["sandbox"]
    owner = (int(sandbox["uid"]), int(sandbox["gid"]))
    what = Launch(
        command=tuple(command),
        sandbox=args["sandbox"],
        uid=int(started["sandbox"]["uid"]),
        gid=int(started["sandbox"]["gid"]),
        secrets_dir=str(document["dir"]),
        mount_path=str(document["mount_path"]),
        env=dict(started["env"]),
        workspace=workspace,
        network=args["network"],
        read_only=tuple(args["read_only"]),
        egress_socket=socket,
        forwarder=tuple(forwarder_argv(EGRESS_SOCKET, [])),
        relay=tuple(relay_argv(str(Path(socket).parent), owner)) if socket else (),
        session=str(document["session"]),
        limits=Limits.from_json(document.get("limits")),
        image=args["image"],
        engine=EngineOptions.from_json(started.get("engine"), args["sandbox"]),
        read_only_root=bool(started.get("read_only_root", True)),
        parent_env=os.environ,
    )
    return launch(what, started=attach)
