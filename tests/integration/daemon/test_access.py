"""Through the daemon a launcher sees, renews and revokes its own sessions only (root and the daemon's uid: all);
it sweeps only as root, and a manifest is decided for the peer the kernel names."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import OTHER_UID, SOCKET_GID, STRANGER_UID, WAIT, Daemon, daemon
from tests.fixtures.openbao import VAULT_TASK, OpenBao

pytestmark = pytest.mark.server
__all__ = ["daemon"]

BOTH_UIDS = """
rules:
  - id: launchers
    tasks: ["fix-*"]
    requesters: ["uid:1000", "uid:1001", "root"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    grants:
      - provider: vault
        policies: ["ci-*"]
        max_ttl: 30m
        max_uses: 100
"""


def _issue(daemon: Daemon, uid: int | None) -> str:
    issued = daemon.client("issue", "--task", str(daemon.task()), "--json", uid=uid)
    assert issued.code == 0, issued.stderr
    return str(issued.json()["session"])


def _states(daemon: Daemon) -> dict[str, str]:
    return {item["session"]: item["state"] for item in daemon.env.run("status", "--all", "--json").json()}


def _refused(result: object, session: str) -> None:
    code, stdout, stderr = (getattr(result, name) for name in ("code", "stdout", "stderr"))
    assert (code, stdout) == (3, ""), stderr
    assert stderr.startswith("broker: error: ") and stderr.count("\n") == 1 and session in stderr


def test_another_uid_cannot_revoke_renew_or_see_a_session_it_did_not_ask_for(daemon: Daemon, openbao: OpenBao) -> None:
    daemon.env.write_policy(BOTH_UIDS)
    daemon.start()
    roots = _issue(daemon, None)
    others = _issue(daemon, OTHER_UID)
    for victim in (roots, others):
        _refused(daemon.client("revoke", "--session", victim, uid=STRANGER_UID), victim)
        _refused(daemon.client("renew", "--session", victim, uid=STRANGER_UID), victim)
    assert _states(daemon) == {roots: "active", others: "active"}  # nothing was revoked
    denied = [r for r in daemon.env.log_records() if r["event"] == "session.denied"]
    assert [(r["session"], r["action"], r["requester"]) for r in denied] == [
        (roots, "revoke", f"uid:{STRANGER_UID}"),
        (roots, "renew", f"uid:{STRANGER_UID}"),
        (others, "revoke", f"uid:{STRANGER_UID}"),
        (others, "renew", f"uid:{STRANGER_UID}"),
    ]
    seen = daemon.client("status", "--all", "--json", uid=STRANGER_UID)
    assert (seen.code, seen.json()) == (0, [])
    by_task = daemon.client("revoke", "--task", "fix-build-7", uid=STRANGER_UID)
    assert by_task.code == 2 and by_task.stderr.startswith("broker: error: no live session for task")
    assert _states(daemon) == {roots: "active", others: "active"}
    assert daemon.env.run("audit", "verify").code == 0


def test_a_uid_acts_on_its_own_sessions_and_root_on_all(daemon: Daemon, openbao: OpenBao) -> None:
    daemon.env.write_policy(BOTH_UIDS)
    daemon.start()
    roots = _issue(daemon, None)
    mine = _issue(daemon, STRANGER_UID)
    others = _issue(daemon, OTHER_UID)
    seen = daemon.client("status", "--json", uid=STRANGER_UID)
    assert seen.code == 0 and [item["session"] for item in seen.json()] == [mine]
    renewed = daemon.client("renew", "--session", mine, "--json", uid=STRANGER_UID)
    assert renewed.code == 0, renewed.stderr
    by_task = daemon.client("revoke", "--task", "fix-build-7", "--json", uid=STRANGER_UID)
    assert by_task.code == 0, by_task.stderr
    assert [report["session"] for report in by_task.json()] == [mine]  # its own session of the task, no other
    assert _states(daemon) == {roots: "active", mine: "revoked", others: "active"}
    everything = daemon.client("status", "--json")
    assert sorted(item["session"] for item in everything.json()) == sorted([roots, others])
    assert daemon.client("revoke", "--session", others).code == 0  # root acts on every session
    assert daemon.client("revoke", "--task", "fix-build-7").code == 0
    assert _states(daemon) == {roots: "revoked", mine: "revoked", others: "revoked"}


PEER_UID = 59123  # no account on the host
OWN_SANDBOX = f"""
rules:
  - id: own-sandbox
    tasks: ["fix-*"]
    requesters: ["uid:{PEER_UID}"]
    sandbox_uids: [{PEER_UID}]
    sandbox_gids: [{SOCKET_GID}]
    grants:
      - provider: vault
        policies: ["ci-*"]
        max_uses: 100
"""
NO_SANDBOX = VAULT_TASK.replace("sandbox: {uid: 1000, gid: 1000, mount_path: /run/secrets}\n", "")


def _raw(daemon: Daemon, uid: int, method: str, target: str) -> tuple[int, Any]:
    """One request on the socket as ``uid``: the status and the JSON body."""
    ask = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
        "s.sendall(sys.argv[2].encode())\n"
        "sys.stdout.buffer.write(s.makefile('rb').read())\n"
    )
    head = f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    answer = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={SOCKET_GID}", "--clear-groups", "/usr/bin/python3", "-I", "-c", ask]
        + [str(daemon.socket), head],
        capture_output=True,
        timeout=WAIT,
        check=True,
    )
    status, _, body = answer.stdout.decode().partition("\r\n\r\n")
    return int(status.split()[1]), json.loads(body)


def test_only_root_sweeps_through_the_daemon(daemon: Daemon, openbao: OpenBao) -> None:
    daemon.start()
    status, body = _raw(daemon, PEER_UID, "POST", "/v1/sweep")
    assert (status, body["exit_code"]) == (403, 3)
    assert body["error"] == f"uid:{PEER_UID} may not sweep: only root may, through the daemon"
    swept, report = daemon.request("POST", "/v1/sweep")
    assert swept == 200 and report["expired"] == []


def test_a_manifest_without_a_sandbox_is_decided_and_issued_for_the_peer_not_the_daemon(
    daemon: Daemon, openbao: OpenBao
) -> None:
    """Before the fix the daemon filled in its own uid (root): a peer's sandbox-less manifest asked for a root
    sandbox, and a rule allowing root sandboxes would have given the peer files owned by root."""
    daemon.env.write_policy(OWN_SANDBOX)
    daemon.start()
    task = daemon.task(NO_SANDBOX)
    check = daemon.client("policy", "check", "--task", str(task), "--json", uid=PEER_UID)
    assert check.code == 0, check.stderr
    assert (check.json()["allowed"], check.json()["requester"]) == (True, f"uid:{PEER_UID}")
    issued = daemon.client("issue", "--task", str(task), "--json", uid=PEER_UID)
    assert issued.code == 0, issued.stderr
    token = Path(issued.json()["dir"], "kv", "token")
    assert (token.stat().st_uid, token.stat().st_gid) == (PEER_UID, SOCKET_GID)
    renewed = daemon.client("renew", "--session", issued.json()["session"], uid=PEER_UID)
    assert renewed.code == 0, renewed.stderr  # decided again for the sandbox it was issued for
    assert daemon.client("revoke", "--session", issued.json()["session"], uid=PEER_UID).code == 0


def test_a_session_an_older_broker_recorded_without_a_uid_is_roots_alone(daemon: Daemon, openbao: OpenBao) -> None:
    daemon.env.write_policy(BOTH_UIDS)
    daemon.start()
    session = _issue(daemon, STRANGER_UID)
    with sqlite3.connect(daemon.env.state_dir / "sessions.db") as conn:  # as a row of an older broker's
        conn.execute("UPDATE sessions SET requester_uid=NULL WHERE id=?", (session,))
    seen = daemon.client("status", "--json", uid=STRANGER_UID)
    assert (seen.code, seen.json()) == (0, [])
    _refused(daemon.client("revoke", "--session", session, uid=STRANGER_UID), session)
    assert daemon.client("revoke", "--session", session).code == 0
    assert _states(daemon) == {session: "revoked"}


def test_a_peer_holds_only_the_exec_session_its_own_connection_started(daemon: Daemon, openbao: OpenBao) -> None:
    daemon.env.write_policy(BOTH_UIDS)
    daemon.start()
    session = _issue(daemon, STRANGER_UID)  # its own, but issued, not started by this connection
    for victim in (session, _issue(daemon, None)):
        status, body = _raw(daemon, STRANGER_UID, "POST", f"/v1/sessions/{victim}/hold")
        assert (status, body["exit_code"]) == (404, 2) and "not an exec session this connection holds" in body["error"]
    assert _states(daemon) == dict.fromkeys(_states(daemon), "active")  # nothing ended
    assert daemon.client("revoke", "--task", "fix-build-7").code == 0
