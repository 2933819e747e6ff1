"""Approvals through a real ``broker serve``, with real peers: other uids (no account) via setpriv, a group made here.

The issue waits (or exits 8 with ``--no-wait``); the approver is whoever the
kernel says is calling (``SO_PEERCRED``, ``SO_PEERGROUPS``), and must give
back the digest it was shown.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.fixtures.approving import (
    APPROVAL_TASK,
    APPROVER_UID,
    REQUESTER_UID,
    SOCKET_GID,
    STRANGER_UID,
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


def _start(daemon: Daemon, group: Group, **policy: str | int) -> str:
    daemon.env.write_policy(approval_policy(group, **policy))  # type: ignore[arg-type]
    daemon.start()
    return str(daemon.task(APPROVAL_TASK))


def _env(daemon: Daemon) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "BROKER_SOCKET": str(daemon.socket), "HOME": "/"}


def _as(daemon: Daemon, uid: int, *args: str, groups: tuple[int, ...] = (), gid: int = SOCKET_GID) -> Result:
    """``broker ARGS`` through the daemon as ``uid`` (primary group the socket's, plus ``groups``)."""
    env = {**_env(daemon), "PYTHONPATH": str(_client_packages())}
    return run(list(args), env, prefix=as_user(uid, gid, groups))


def _accessors(daemon: Daemon) -> list[str]:
    return [r["reference"]["accessor"] for r in daemon.env.log_records() if r["event"] == "credential.issued"]


def test_an_approver_of_the_rules_group_approves_and_the_waiting_issue_returns_the_session(
    daemon: Daemon, openbao: OpenBao, approvers: Group
) -> None:
    task = _start(daemon, approvers)
    waiting = Waiting(["issue", "--task", task, "--json"], _env(daemon))
    request, digest = waiting.request()
    assert _accessors(daemon) == []  # nothing minted while it waits
    assert daemon.env.run("status", "--json").json()[0]["state"] == "awaiting-approval"
    listed = _as(daemon, APPROVER_UID, "approvals", "--json", groups=(approvers.gid,))
    assert listed.code == 0, listed.stderr
    [shown] = listed.json()
    assert (shown["request"], shown["digest"], shown["state"]) == (request, digest, "pending")
    assert shown["summary"]["decision"]["credentials"][0]["rule"] == "deploys"
    text = _as(daemon, APPROVER_UID, "approvals", groups=(approvers.gid,))
    assert request in text.stdout and digest in text.stdout and '"policies": ["ci-read"]' in text.stdout
    approved = _as(daemon, APPROVER_UID, "approve", request, "--digest", digest, groups=(approvers.gid,))
    assert approved.code == 0, approved.stderr
    issued = waiting.finish()
    assert issued.code == 0, issued.stderr
    document = issued.json()
    assert document["session"] == request  # the request's session, now issued
    [accessor] = _accessors(daemon)
    assert openbao.accessor_exists(accessor)
    records = [r for r in daemon.env.log_records() if r["event"].startswith("approval.")]
    assert [r["event"] for r in records] == ["approval.requested", "approval.granted"]
    assert records[1]["approver"] == f"uid:{APPROVER_UID}" and records[1]["digest"] == digest
    assert daemon.client("revoke", "--session", request).code == 0
    assert daemon.env.run("audit", "verify").code == 0


def test_a_requester_never_approves_their_own_request(daemon: Daemon, openbao: OpenBao, approvers: Group) -> None:
    task = _start(daemon, approvers)  # uid 1000 asks, and the rule names uid 1000 as an approver too
    asked = _as(daemon, REQUESTER_UID, "issue", "--task", task, "--no-wait")
    assert asked.code == 8, asked.stderr
    request, digest = pending_request(asked.stderr)
    own = _as(daemon, REQUESTER_UID, "approve", request, "--digest", digest)
    assert own.code == 3 and "never approves their own request" in own.stderr, own.stderr
    stranger = _as(daemon, STRANGER_UID, "approve", request, "--digest", digest)
    assert stranger.code == 3 and "is not an approver" in stranger.stderr, stranger.stderr
    still = daemon.env.run("approvals", "--json").json()
    assert [(item["request"], item["state"]) for item in still] == [(request, "pending")]
    refused = [r for r in daemon.env.log_records() if r["event"] == "session.denied"]
    assert [(r["session"], r["action"]) for r in refused] == [(request, "approve"), (request, "approve")]
    assert _accessors(daemon) == []


def test_an_approval_binds_to_the_digest_it_was_shown(daemon: Daemon, openbao: OpenBao, approvers: Group) -> None:
    task = _start(daemon, approvers)
    asked = daemon.client("issue", "--task", task, "--no-wait", "--json")
    assert asked.code == 8, asked.stderr
    request, digest = pending_request(asked.stderr)
    assert asked.json()["digest"] == digest  # --json: the request on stdout too
    other = "0" * 64 if digest != "0" * 64 else "1" * 64
    wrong = _as(daemon, APPROVER_UID, "approve", request, "--digest", other, groups=(approvers.gid,))
    assert wrong.code == 3 and "does not match" in wrong.stderr, wrong.stderr
    malformed = _as(daemon, APPROVER_UID, "approve", request, "--digest", "abc", groups=(approvers.gid,))
    assert malformed.code == 2, malformed.stderr
    early = daemon.client("issue", "--resume", request, "--no-wait")
    assert early.code == 8 and request in early.stderr, early.stderr
    # the approvers' group as the primary one this time (the socket's as a supplementary one), the digest prefixed
    primary = (f"sha256:{digest.upper()}", approvers.gid, (SOCKET_GID,))
    prefixed = _as(daemon, APPROVER_UID, "approve", request, "--digest", primary[0], gid=primary[1], groups=primary[2])
    assert prefixed.code == 0, prefixed.stderr
    again = _as(daemon, APPROVER_UID, "approve", request, "--digest", digest, groups=(approvers.gid,))
    assert again.code == 2 and "granted" in again.stderr, again.stderr
    collected = daemon.client("issue", "--resume", request, "--json")
    assert collected.code == 0, collected.stderr
    assert collected.json()["session"] == request
    twice = daemon.client("issue", "--resume", request)
    assert twice.code == 2 and "collected already" in twice.stderr, twice.stderr
    assert len(_accessors(daemon)) == 1
    assert daemon.client("revoke", "--session", request).code == 0


def test_a_request_pending_across_a_daemon_restart_is_approved_and_collected_after(
    daemon: Daemon, openbao: OpenBao, approvers: Group
) -> None:
    task = _start(daemon, approvers)
    asked = daemon.client("issue", "--task", task, "--no-wait")
    assert asked.code == 8, asked.stderr
    request, digest = pending_request(asked.stderr)
    assert daemon.stop(signal.SIGKILL) == -signal.SIGKILL  # no goodbye: the store alone keeps it
    daemon.start()
    listed = _as(daemon, APPROVER_UID, "approvals", "--json", groups=(approvers.gid,))
    assert [item["request"] for item in listed.json()] == [request], listed.stderr
    assert _as(daemon, APPROVER_UID, "approve", request, "--digest", digest, groups=(approvers.gid,)).code == 0
    assert daemon.stop() == 0
    daemon.start()
    collected = daemon.client("issue", "--resume", request, "--json")
    assert collected.code == 0, collected.stderr
    [accessor] = _accessors(daemon)
    assert openbao.accessor_exists(accessor)
    assert daemon.client("revoke", "--session", request).code == 0
    assert daemon.env.run("audit", "verify").code == 0


def test_a_waiting_issue_rides_out_a_daemon_restart(daemon: Daemon, openbao: OpenBao, approvers: Group) -> None:
    task = _start(daemon, approvers)
    waiting = Waiting(["issue", "--task", task, "--json", "--wait", "5m"], _env(daemon))
    request, digest = waiting.request()
    assert daemon.stop() == 0  # a graceful stop answers the waiting client at once
    daemon.start()
    assert _as(daemon, APPROVER_UID, "approve", request, "--digest", digest, groups=(approvers.gid,)).code == 0
    issued = waiting.finish()
    assert issued.code == 0, issued.stderr
    assert issued.json()["session"] == request
    assert daemon.client("revoke", "--session", request).code == 0


def test_a_denied_request_mints_nothing_and_the_waiting_issue_says_why(
    daemon: Daemon, openbao: OpenBao, approvers: Group
) -> None:
    task = _start(daemon, approvers)
    waiting = Waiting(["issue", "--task", task], _env(daemon))
    request, _ = waiting.request()
    denied = _as(daemon, APPROVER_UID, "deny", request, "--reason", "not during the freeze", groups=(approvers.gid,))
    assert denied.code == 0, denied.stderr
    issued = waiting.finish()
    assert issued.code == 3 and "not during the freeze" in issued.stderr, issued.stderr
    assert _accessors(daemon) == []
    states = {item["session"]: item["state"] for item in daemon.env.run("status", "--all", "--json").json()}
    assert states == {request: "denied"}
    [record] = [r for r in daemon.env.log_records() if r["event"] == "approval.denied"]
    assert record["reason"] == "not during the freeze" and record["approver"] == f"uid:{APPROVER_UID}"


def test_an_undecided_request_expires_and_can_be_neither_approved_nor_collected(
    daemon: Daemon, openbao: OpenBao, approvers: Group
) -> None:
    task = _start(daemon, approvers, timeout="2s")
    asked = daemon.client("issue", "--task", task, "--no-wait")
    request, digest = pending_request(asked.stderr)
    waited = daemon.client("issue", "--resume", request, "--wait", "10s")
    assert waited.code == 3 and "expired" in waited.stderr, waited.stderr
    late = _as(daemon, APPROVER_UID, "approve", request, "--digest", digest, groups=(approvers.gid,))
    assert late.code == 2 and "expired" in late.stderr, late.stderr
    [record] = [r for r in daemon.env.log_records() if r["event"] == "approval.expired"]
    assert record["session"] == request and record["was"] == "pending"
    assert _accessors(daemon) == []
    assert daemon.env.run("audit", "verify").code == 0


def test_a_short_wait_ends_with_exit_8_and_the_request_stays_pending(
    daemon: Daemon, openbao: OpenBao, approvers: Group
) -> None:
    task = _start(daemon, approvers)
    started = time.monotonic()
    waited = daemon.client("issue", "--task", task, "--wait", "1s")
    assert waited.code == 8 and "still awaiting approval" in waited.stderr, waited.stderr
    assert time.monotonic() - started < 30
    [item] = daemon.env.run("approvals", "--json").json()
    assert item["state"] == "pending"


def test_exec_through_the_daemon_waits_for_its_approval_then_runs(
    daemon: Daemon, openbao: OpenBao, approvers: Group
) -> None:
    task = _start(daemon, approvers)
    waiting = Waiting(["exec", "--task", task, "--", "sh", "-c", 'echo "ran in $BROKER_SESSION"'], _env(daemon))
    request, digest = waiting.request()
    time.sleep(11)  # past the daemon's 10 s head deadline: the client asks again on a fresh connection
    assert _as(daemon, APPROVER_UID, "approve", request, "--digest", digest, groups=(approvers.gid,)).code == 0
    ran = waiting.finish()
    assert ran.code == 0, ran.stderr
    assert ran.stdout == f"ran in {request}\n"
    states = {item["session"]: item["state"] for item in daemon.env.run("status", "--all", "--json").json()}
    assert states == {request: "revoked"}
    no_wait = daemon.client("exec", "--task", task, "--no-wait", "--", "true")
    assert no_wait.code == 8 and "awaiting approval" in no_wait.stderr, no_wait.stderr
