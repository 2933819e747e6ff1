"""A revoke on one host of a session another host holds lands at once: three daemons on one real PostgreSQL.

Each host is a broker installation with its own daemon (``broker serve``),
sharing one PostgreSQL store, the OpenBao dev server and the GitHub App
emulator. A GitHub token can be revoked only with itself, which only the
issuing host's keep-safe holds, so before the holder's daemon listened for
revokes (LISTEN/NOTIFY) a revoke from another host left the token valid
(``pending``) until the holder's next sweep. The sweep interval here is an
hour: whatever finishes a revocation in these tests is the listening daemon
(or the restart and the sweep the test runs itself).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devstack.github_app import GitHubAppEmulator
from tests.fixtures.approving import APPROVAL_TASK, Group, approval_policy, approvers, pending_request
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.crash import add_github, github_tokens, tokens_of
from tests.fixtures.daemon import SOCKET_GID, WAIT, Daemon
from tests.fixtures.fleet import FleetDb, create_fleet_db, new_host
from tests.fixtures.github import AppKeys
from tests.fixtures.openbao import OpenBao
from tests.fixtures.postgres import Postgres

__all__ = ["approvers"]  # fixtures
pytestmark = pytest.mark.server

POLICY = """
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: ["0-65534"]
    sandbox_gids: ["0-65534"]
    grants:
      - {provider: github, repositories: ["octo-org/widgets"], permissions: {contents: write}}
      - {provider: vault, policies: ["ci-*"], max_uses: 100}
"""
TASK = """
version: 1
task: fix-build-9
ttl: 20m
sandbox: {uid: 1000, gid: 1000, mount_path: /run/secrets}
credentials:
  - {name: repo, provider: github, repositories: [octo-org/widgets], permissions: {contents: write}}
  - {name: kv, provider: vault, policies: [ci-read], num_uses: 5}
"""


@dataclass
class Fleet:
    a: Daemon
    b: Daemon
    c: Daemon
    db: FleetDb
    emulator: GitHubAppEmulator

    def issue_on_a(self) -> dict[str, object]:
        issued = self.a.client("issue", "--task", str(self.a.task(TASK)), "--json")
        assert issued.code == 0, issued.stderr
        document: dict[str, object] = issued.json()
        assert document["host"] == "host-a"
        return document

    def token_states(self) -> list[str]:
        return sorted(github_tokens(self.emulator).values())


@pytest.fixture
def fleet(
    tmp_path: Path, openbao: OpenBao, postgres: Postgres, github_emulator: GitHubAppEmulator, github_app_keys: AppKeys
) -> Iterator[Fleet]:
    db = create_fleet_db(postgres, tmp_path)
    daemons = []
    for name in ("host-a", "host-b", "host-c"):
        env = new_host(tmp_path, openbao, db, name)
        add_github(env, github_emulator, github_app_keys)
        env.write_policy(POLICY)
        shared = Path(tempfile.mkdtemp(prefix=f"broker-{name}-", dir="/tmp"))
        shared.chmod(0o755)
        env.tables["daemon"] = {"socket": str(shared / "broker.sock"), "socket_group": str(SOCKET_GID),
                                "sweep_interval": "1h"}  # fmt: skip
        env.write_config()
        daemons.append(Daemon(env, shared))
    try:
        yield Fleet(daemons[0], daemons[1], daemons[2], db, github_emulator)
    finally:
        for daemon in daemons:
            if daemon.process is not None:
                daemon.stop(signal.SIGKILL)
            daemon.env.cleanup()
            shutil.rmtree(daemon.shared, ignore_errors=True)


def listening(daemon: Daemon, db: FleetDb, postgres: Postgres) -> Daemon:
    """``daemon`` once its connection listens for revokes (its listener lock is held)."""
    from broker.core.store.postgres.revokes import _lock_parts
    from tests.integration.audit.test_fleet_log import postgres_query

    host = daemon.env.settings["host"]
    sql = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid::int8 = %s AND objid::int8 = %s"
    deadline = time.monotonic() + WAIT
    while postgres_query(postgres, db, sql, *_lock_parts(str(host)))[0][0] == 0:
        assert time.monotonic() < deadline, "the daemon never listened"
        time.sleep(0.05)
    return daemon


def outcomes(report: dict[str, object]) -> dict[str, str]:
    credentials = report["credentials"]
    assert isinstance(credentials, list)
    return {item["name"]: item["outcome"] for item in credentials}


def running_exec(env: BrokerEnv) -> bool:
    """Whether a direct ``exec`` holds its session: its control socket is up (after it marked the session its own;
    its directory appears before, while the issue that precedes it can still be told apart from an exec)."""
    return bool(env.session_dirs()) and any((env.state_dir / "control").glob("*.sock"))


def finished_by_a(fleet: Fleet) -> None:
    """Wait until host A has finished its one session: the token revoked, the directory gone, the session ended
    (in that order: the session's state is the last thing a revocation writes)."""
    deadline = time.monotonic() + WAIT
    while True:
        status = fleet.b.env.run("status", "--all", "--json").json()
        found = [(item["state"], [c["state"] for c in item["credentials"]]) for item in status]
        if fleet.token_states() == ["revoked"] and not fleet.a.env.session_dirs() and found[0][0] == "revoked":
            break
        assert time.monotonic() < deadline, f"host A never finished the revoke: {found}"
        time.sleep(0.05)
    assert found == [("revoked", ["revoked", "revoked"])]


def quiet(daemon: Daemon) -> None:
    """Nothing in the daemon's log but what a healthy daemon says."""
    log = (daemon.env.root / "daemon.log").read_text()
    assert "Traceback" not in log and "failed" not in log and "error" not in log.lower(), log


def test_a_github_session_held_by_a_and_revoked_from_b_is_revoked_by_a_at_once(
    fleet: Fleet, postgres: Postgres, openbao: OpenBao
) -> None:
    for daemon in (fleet.a, fleet.b, fleet.c):
        listening(daemon.start(), fleet.db, postgres)
    first, second = fleet.issue_on_a(), fleet.issue_on_a()
    assert fleet.token_states() == ["valid", "valid"]

    direct = fleet.b.env.run("revoke", "--session", str(first["session"]), "--json")  # B's direct CLI
    assert direct.code == 0, direct.stderr
    report = direct.json()
    assert outcomes(report) == {"repo": "revoked", "kv": "revoked"}
    assert (report["dir_removed"], report["dir_host"]) == (True, "host-a")
    assert fleet.token_states() == ["revoked", "valid"]
    assert tokens_of(openbao, str(first["session"])) == []

    through = fleet.b.client("revoke", "--session", str(second["session"]), "--json")  # B's daemon, as root
    assert through.code == 0, through.stderr
    assert outcomes(through.json()) == {"repo": "revoked", "kv": "revoked"}
    assert through.json()["dir_removed"] is True
    assert fleet.token_states() == ["revoked", "revoked"]
    assert fleet.a.env.session_dirs() == []

    # Host C heard both announcements and left host A's sessions alone; it sees them revoked and nothing to do.
    states = {item["session"]: item["state"] for item in fleet.c.client("status", "--all", "--json").json()}
    assert states == {first["session"]: "revoked", second["session"]: "revoked"}
    swept = fleet.c.env.run("sweep", "--json").json()
    assert (swept["pending"], swept["asked"], swept["malformed"], swept["busy"]) == ([], [], [], [])
    for daemon in (fleet.a, fleet.b, fleet.c):
        assert daemon.env.run("audit", "verify").code == 0
    revoked = [r for r in fleet.a.env.log_records() if r["event"] == "credential.revoked" and r["credential"] == "repo"]
    assert len(revoked) == 2  # GitHub's tokens were revoked by host A, the one that kept them
    for daemon in (fleet.a, fleet.b, fleet.c):
        assert daemon.stop() == 0
        quiet(daemon)


def test_with_the_holders_daemon_down_the_revoke_is_pending_and_its_next_start_finishes_it(
    fleet: Fleet, postgres: Postgres
) -> None:
    listening(fleet.a.start(), fleet.db, postgres)
    session = str(fleet.issue_on_a()["session"])
    assert fleet.a.stop() == 0
    listening(fleet.c.start(), fleet.db, postgres)

    result = fleet.b.env.run("revoke", "--session", session, "--json")
    assert result.code == 5, result.stderr  # pending: only host A can revoke the token, and it does not listen
    assert outcomes(result.json()) == {"repo": "pending", "kv": "revoked"}
    assert result.json()["dir_removed"] is False
    assert fleet.token_states() == ["valid"]
    assert fleet.a.env.session_dirs() == [session]
    failed = [r for r in fleet.b.env.log_records() if r["event"] == "credential.revoke_failed"]
    assert [r["error"] for r in failed] == ["only host-a, which holds the session, keeps what revokes it"]

    listening(fleet.a.start(), fleet.db, postgres)  # its next start finishes what it was asked meanwhile
    finished_by_a(fleet)
    assert fleet.b.env.run("audit", "verify").code == 0
    for daemon in (fleet.a, fleet.c):
        assert daemon.stop() == 0
        quiet(daemon)


def test_without_a_daemon_the_holders_next_sweep_finishes_an_exec_it_runs(fleet: Fleet, postgres: Postgres) -> None:
    """A direct ``exec`` on host A holds its session; B's revoke is asked of A, whose sweep stops the exec."""
    env = fleet.a.env
    task = env.write_task(TASK)
    argv = [sys.executable, "-m", "broker.cli", "--config", str(env.config_path)]
    running = subprocess.Popen([*argv, "exec", "--sandbox", "none", "--task", str(task), "--", "sleep", "120"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + WAIT
        while not running_exec(env):
            assert running.poll() is None and time.monotonic() < deadline, running.stderr and running.stderr.read()
            time.sleep(0.05)
        session = env.session_dirs()[0]
        result = fleet.b.env.run("revoke", "--session", session, "--json")
        assert result.code == 5, result.stderr  # the exec on host A holds the session; nothing is revoked from B
        assert outcomes(result.json()) == {"repo": "pending", "kv": "pending"}
        assert fleet.token_states() == ["valid"] and running.poll() is None

        swept = env.run("sweep", "--json")  # host A's next sweep: it asks its exec to stop, which revokes
        assert swept.code == 0, swept.stderr
        assert swept.json()["asked"] == [session]
        assert running.wait(timeout=WAIT) == 128 + signal.SIGTERM
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert fleet.token_states() == ["revoked"]
    assert env.session_dirs() == []
    assert fleet.b.env.run("audit", "verify").code == 0


def test_an_exec_on_a_is_stopped_by_as_daemon_when_b_revokes_it(fleet: Fleet, postgres: Postgres) -> None:
    listening(fleet.a.start(), fleet.db, postgres)
    env = fleet.a.env
    argv = [sys.executable, "-m", "broker.cli", "--config", str(env.config_path)]
    task = env.write_task(TASK)
    running = subprocess.Popen([*argv, "exec", "--sandbox", "none", "--task", str(task), "--", "sleep", "120"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + WAIT
        while not running_exec(env):
            assert running.poll() is None and time.monotonic() < deadline, running.stderr and running.stderr.read()
            time.sleep(0.05)
        session = env.session_dirs()[0]
        result = fleet.b.env.run("revoke", "--session", session, "--json")
        assert result.code == 0, result.stderr
        assert outcomes(result.json()) == {"repo": "revoked", "kv": "revoked"}
        assert result.json()["dir_removed"] is True
        assert running.wait(timeout=WAIT) == 128 + signal.SIGTERM
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert fleet.token_states() == ["revoked"]
    assert fleet.b.env.run("audit", "verify").code == 0
    assert fleet.a.stop() == 0
    quiet(fleet.a)


def test_a_holder_that_listens_but_does_not_answer_is_waited_for_fleet_revoke_wait_then_finishes(
    fleet: Fleet, postgres: Postgres
) -> None:
    """A's daemon stopped (SIGSTOP) still holds its listener: B waits ``fleet_revoke_wait``, then says ``pending``."""
    listening(fleet.a.start(), fleet.db, postgres)
    session = str(fleet.issue_on_a()["session"])
    fleet.b.env.settings["fleet_revoke_wait"] = "2s"
    fleet.b.env.write_config()
    assert fleet.a.process is not None
    fleet.a.process.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        result = fleet.b.env.run("revoke", "--session", session, "--json")
        waited = time.monotonic() - started
    finally:
        fleet.a.process.send_signal(signal.SIGCONT)
    assert result.code == 5, result.stderr  # not answered within the wait: pending, never a hang
    assert outcomes(result.json()) == {"repo": "pending", "kv": "revoked"}
    assert waited >= 2  # it did wait for the holder, as long as it was told to (and returned: the run is bounded)

    finished_by_a(fleet)  # A, running again, finishes the ask it heard while stopped
    assert fleet.a.stop() == 0
    quiet(fleet.a)


def test_a_request_awaiting_approval_on_a_revoked_from_b_is_asked_of_a_and_withdrawn(
    fleet: Fleet, postgres: Postgres, approvers: Group
) -> None:
    """The fleet revoke and an approval request: B asks A, as for any session A holds; the request is withdrawn
    (nobody may approve or collect it), the session revoked, and nothing was minted for it anywhere."""
    from tests.integration.audit.test_fleet_log import postgres_query

    for daemon in (fleet.a, fleet.b):
        daemon.env.write_policy(approval_policy(approvers))
        listening(daemon.start(), fleet.db, postgres)
    asked = fleet.a.client("issue", "--task", str(fleet.a.task(APPROVAL_TASK)), "--no-wait")
    assert asked.code == 8, asked.stderr
    request, _ = pending_request(asked.stderr)

    revoked = fleet.b.env.run("revoke", "--task", "deploy-7", "--json")  # an awaiting session is one of the task's
    assert revoked.code == 0, revoked.stderr
    [report] = revoked.json()
    assert (report["session"], report["credentials"], report["dir_host"]) == (request, [], "host-a")
    sql = "SELECT host, asked_by FROM revoke_requests WHERE session_id = %s"
    assert postgres_query(postgres, fleet.db, sql, request) == [("host-a", "host-b")]  # A was asked
    assert fleet.b.env.run("approvals", "--json").json() == []  # withdrawn: no longer open, on either host
    assert fleet.a.env.run("approvals", "--json").json() == []
    resumed = fleet.a.client("issue", "--resume", request, "--no-wait")
    assert resumed.code == 2 and "withdrawn" in resumed.stderr, resumed.stderr
    states = {item["session"]: item["state"] for item in fleet.b.env.run("status", "--all", "--json").json()}
    assert states == {request: "revoked"}
    assert not [r for r in fleet.a.env.log_records() if r["event"] == "credential.issued"]
    for daemon in (fleet.a, fleet.b):
        assert daemon.stop() == 0
        quiet(daemon)
