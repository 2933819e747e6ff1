"""Through the daemon a launcher sees, renews and revokes its own sessions only (root and the daemon's uid: all)."""

from __future__ import annotations

import pytest

from tests.fixtures.daemon import OTHER_UID, STRANGER_UID, Daemon, daemon
from tests.fixtures.openbao import OpenBao

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
