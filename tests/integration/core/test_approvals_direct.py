"""Approvals without a daemon in the requester's path: the direct ``issue`` waits on the store itself.

The approver may be another uid through the daemon on the same store, or the
process's own uid in direct mode; the stored manifest is decided again when
the session is collected, so a policy changed after the approval mints
nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures.approving import (
    APPROVAL_TASK,
    APPROVER_UID,
    SOCKET_GID,
    Group,
    Waiting,
    approval_policy,
    approvers,
    as_user,
    pending_request,
    run,
)
from tests.fixtures.brokerenv import Result
from tests.fixtures.daemon import Daemon, _client_packages, daemon
from tests.fixtures.openbao import OpenBao

__all__ = ["approvers", "daemon"]  # fixtures
pytestmark = pytest.mark.server


def _direct_config(daemon: Daemon) -> Path:
    """The daemon's own config without its socket: direct mode on the same store, as root."""
    direct = daemon.env.root / "direct.toml"
    text = daemon.env.config_path.read_text()
    direct.write_text("\n".join(line for line in text.splitlines() if not line.startswith("socket = ")) + "\n")
    return direct


def _direct(daemon: Daemon, *args: str) -> Result:
    env = {"PATH": os.environ["PATH"], "HOME": "/"}
    return run(["--config", str(_direct_config(daemon)), *args], env)


def _approve_as_approver(daemon: Daemon, group: Group, request: str, digest: str) -> Result:
    env = {"PATH": os.environ["PATH"], "BROKER_SOCKET": str(daemon.socket), "HOME": "/"}
    env["PYTHONPATH"] = str(_client_packages())
    return run(["approve", request, "--digest", digest], env, prefix=as_user(APPROVER_UID, SOCKET_GID, (group.gid,)))


def _accessors(daemon: Daemon) -> list[str]:
    return [r["reference"]["accessor"] for r in daemon.env.log_records() if r["event"] == "credential.issued"]


def test_a_direct_issue_waits_on_the_store_for_an_approval_given_elsewhere(
    daemon: Daemon, openbao: OpenBao, approvers: Group
) -> None:
    daemon.env.write_policy(approval_policy(approvers))
    daemon.start()
    task = daemon.task(APPROVAL_TASK)
    env = {"PATH": os.environ["PATH"], "HOME": "/"}
    waiting = Waiting(["--config", str(_direct_config(daemon)), "issue", "--task", str(task), "--json"], env)
    request, digest = waiting.request()
    approved = _approve_as_approver(daemon, approvers, request, digest)
    assert approved.code == 0, approved.stderr
    issued = waiting.finish()
    assert issued.code == 0, issued.stderr
    assert issued.json()["session"] == request
    [accessor] = _accessors(daemon)
    assert openbao.accessor_exists(accessor)
    assert _direct(daemon, "revoke", "--session", request).code == 0
    assert _direct(daemon, "audit", "verify").code == 0


def test_the_process_uid_approves_in_direct_mode_but_never_its_own_request(
    daemon: Daemon, openbao: OpenBao, approvers: Group
) -> None:
    daemon.env.write_policy(approval_policy(approvers, extra=0))  # root is an approver
    daemon.start()
    task = str(daemon.task(APPROVAL_TASK))
    own = _direct(daemon, "issue", "--task", task, "--no-wait")
    assert own.code == 8, own.stderr
    request, digest = pending_request(own.stderr)
    refused = _direct(daemon, "approve", request, "--digest", digest)
    assert refused.code == 3 and "never approves their own request" in refused.stderr, refused.stderr
    env = {"PATH": os.environ["PATH"], "BROKER_SOCKET": str(daemon.socket), "HOME": "/"}
    env["PYTHONPATH"] = str(_client_packages())
    theirs = run(["issue", "--task", task, "--no-wait"], env, prefix=as_user(1000, SOCKET_GID))
    assert theirs.code == 8, theirs.stderr
    other, other_digest = pending_request(theirs.stderr)
    approved = _direct(daemon, "approve", other, "--digest", other_digest)  # root, directly, for uid 1000
    assert approved.code == 0, approved.stderr
    collected = run(["issue", "--resume", other, "--json"], env, prefix=as_user(1000, SOCKET_GID))
    assert collected.code == 0, collected.stderr
    assert collected.json()["session"] == other
    not_yours = run(["issue", "--resume", request], env, prefix=as_user(1000, SOCKET_GID))
    assert not_yours.code == 3, not_yours.stderr  # root's request is not uid 1000's to collect
    assert _direct(daemon, "revoke", "--session", other).code == 0


def test_an_approved_request_the_policy_now_decides_otherwise_mints_nothing(
    daemon: Daemon, openbao: OpenBao, approvers: Group
) -> None:
    daemon.env.write_policy(approval_policy(approvers))
    daemon.start()
    task = str(daemon.task(APPROVAL_TASK))
    asked = _direct(daemon, "issue", "--task", task, "--no-wait")
    request, digest = pending_request(asked.stderr)
    assert _approve_as_approver(daemon, approvers, request, digest).code == 0
    daemon.env.write_policy(approval_policy(approvers).replace("max_ttl: 1h", "max_ttl: 15m"))  # a shorter session
    collected = _direct(daemon, "issue", "--resume", request)
    assert collected.code == 3 and "digest differs" in collected.stderr, collected.stderr
    assert _accessors(daemon) == []


def test_exec_waits_for_its_approval_then_runs_the_command(daemon: Daemon, openbao: OpenBao, approvers: Group) -> None:
    daemon.env.write_policy(approval_policy(approvers))
    daemon.start()
    task = str(daemon.task(APPROVAL_TASK))
    command = ["--config", str(_direct_config(daemon)), "exec", "--task", task, "--sandbox", "none", "--"]
    command += ["/bin/sh", "-c", 'echo "ran in $BROKER_SESSION"']
    env = {"PATH": os.environ["PATH"], "HOME": "/"}
    waiting = Waiting(command, env)
    request, digest = waiting.request()
    assert _approve_as_approver(daemon, approvers, request, digest).code == 0
    ran = waiting.finish()
    assert ran.code == 0, ran.stderr
    assert ran.stdout == f"ran in {request}\n"
    states = {item["session"]: item["state"] for item in daemon.env.run("status", "--all", "--json").json()}
    assert states == {request: "revoked"}  # run, then revoked when the command ended
    [accessor] = _accessors(daemon)
    assert not openbao.accessor_exists(accessor)
