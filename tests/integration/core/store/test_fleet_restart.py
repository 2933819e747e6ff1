"""Fleet mode when the database goes away under load: a clear exit, nothing half-written, recovery.

Three broker hosts (separate config, state and runtime dirs; one store on a
PostgreSQL server of this test's own) run ``issue``/``status``/``revoke``
cycles as real CLI processes against the real OpenBao while the server is
stopped (``-m fast``, then ``-m immediate``: a crash) and started again.
Every command that fails says so in one ``broker: error:`` line with the
store's exit code; once the server is back, ``sweep`` settles what the
outage interrupted and OpenBao holds no token the store does not account for.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest

from broker.vocab.errors import IssueRolledBack, StoreError
from tests.fixtures.brokerenv import BrokerEnv, Result, make_env
from tests.fixtures.crash import tokens_of, wait_for
from tests.fixtures.fleet import FleetDb, create_fleet_db, join_fleet
from tests.fixtures.openbao import VAULT_TASK, OpenBao, add_vault_provider
from tests.fixtures.postgres import Postgres, new_postgres, start_server, stop_postgres, stop_server
from tests.fixtures.slowproxy import slow_proxy

pytestmark = pytest.mark.server

HOSTS = ("host-a", "host-b", "host-c")
TASK_NAME = "fix-restart-" + secrets.token_hex(4)  # this test's tokens, among those other tests left on OpenBao


@dataclass(frozen=True)
class Ran:
    host: str
    command: str
    result: Result
    during: int  # which outage was under way when the command ended (0: none)


@pytest.fixture
def own_postgres() -> Iterator[Postgres]:
    """A server this test may stop and start without disturbing the other tests' database."""
    server = new_postgres()
    try:
        yield server
    finally:
        stop_postgres(server)


@dataclass(frozen=True)
class Fleet:
    envs: list[BrokerEnv]
    db: FleetDb
    server: Postgres

    def rows(self, sql: str) -> list[tuple[object, ...]]:
        """What the store holds right now (read as the superuser, beside the brokers)."""
        import psycopg

        dsn = self.server.dsn(dbname=self.db.name)
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as connection:
            return list(connection.execute(sql.encode()).fetchall())


@pytest.fixture
def fleet(tmp_path: Path, openbao: OpenBao, own_postgres: Postgres) -> Iterator[Fleet]:
    db = create_fleet_db(own_postgres, tmp_path)
    envs = []
    for name in HOSTS:
        folder = tmp_path / name
        folder.mkdir()
        env = make_env(folder)
        add_vault_provider(env, openbao)
        env.write_task(VAULT_TASK.replace("task: fix-build-7", f"task: {TASK_NAME}"))
        envs.append(join_fleet(env, db, name))
    try:
        yield Fleet(envs, db, own_postgres)
    finally:
        for env in envs:
            env.cleanup()


def reach_vault_through(envs: list[BrokerEnv], addr: str) -> None:
    for env in envs:
        env.providers["vault"]["addr"] = addr
        env.write_config()


class Load:
    """One thread per host: issue, status, revoke, again and again, every command recorded."""

    def __init__(self, envs: list[BrokerEnv]) -> None:
        self.envs = envs
        self.ran: list[Ran] = []
        self.outage = 0
        self._stop = threading.Event()
        self._guard = threading.Lock()
        self._threads = [
            threading.Thread(target=self._cycle, args=(env, name)) for env, name in zip(envs, HOSTS, strict=True)
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)

    def _run(self, env: BrokerEnv, host: str, *args: str) -> Result:
        try:
            result = env.run_process(*args, timeout=90)
        except subprocess.TimeoutExpired:  # a command hanging on a dead server is a failure the test reports
            result = Result(-1, "", f"{args[0]} still running after 90 s")
        with self._guard:
            self.ran.append(Ran(host, args[0], result, self.outage))
        return result

    def _cycle(self, env: BrokerEnv, host: str) -> None:
        task = str(env.root / "task.yaml")
        while not self._stop.is_set():
            issued = self._run(env, host, "issue", "--task", task, "--json")
            self._run(env, host, "status", "--json")
            if issued.code == 0:
                self._run(env, host, "revoke", "--session", issued.json()["session"], "--json")

    def succeeded_since(self, index: int) -> int:
        with self._guard:
            return sum(1 for r in self.ran[index:] if r.result.code == 0 and r.command == "issue")


def outage(load: Load, fleet: Fleet, number: int, mode: str, caught: str) -> None:
    """Once the store shows a command half-way (``caught``), stop the server until every host saw a command
    fail, then start it again."""
    mark = len(load.ran)
    wait_for(lambda: load.succeeded_since(mark) >= 2, 120)  # cycles are running on the hosts
    wait_for(lambda: bool(fleet.rows(caught)), 120)
    load.outage = number
    stop_server(fleet.server, mode)
    try:
        wait_for(lambda: {r.host for r in load.ran[mark:] if r.result.code != 0} == set(HOSTS), 120)
    finally:
        start_server(fleet.server)
        load.outage = 0


MID_ISSUE = "SELECT 1 FROM credentials WHERE state = 'minting'"
MID_REVOKE = "SELECT 1 FROM sessions WHERE state = 'revoking'"


def test_a_database_restart_under_load_fails_cleanly_and_sweep_settles_everything(
    fleet: Fleet, openbao: OpenBao
) -> None:
    hosts, own_postgres = fleet.envs, fleet.server
    port = urlparse(openbao.addr).port or 0
    # Vault answers each request after a pause, so commands are in flight when the server stops.
    with slow_proxy(port, 0.2, every_request=True) as proxy, Load(hosts) as load:
        reach_vault_through(hosts, proxy.addr)
        outage(load, fleet, 1, "fast", MID_ISSUE)
        outage(load, fleet, 2, "immediate", MID_REVOKE)
        outage(load, fleet, 3, "immediate", MID_ISSUE)
        mark = len(load.ran)
        wait_for(lambda: load.succeeded_since(mark) >= 3, 120)  # commands succeed again once it is back
    failed = [r for r in load.ran if r.result.code != 0]
    assert failed, "the outages made no command fail"
    for ran in failed:
        text = ran.result.stdout + ran.result.stderr
        what = f"{ran.host} {ran.command} exit {ran.result.code}: {ran.result.stderr!r}"
        assert own_postgres.password not in text, what
        assert_one_store_error(ran.result, what)
        if ran.result.code == IssueRolledBack.exit_code:  # the store went away after something was minted
            assert ran.command == "issue", what
        else:
            assert ran.result.code == StoreError.exit_code, what
    for ran in load.ran:
        assert own_postgres.password not in ran.result.stdout + ran.result.stderr

    reach_vault_through(hosts, openbao.addr)
    a, b, c = hosts
    for env in hosts:  # each host settles what the outage left: revocations at OpenBao, its own directories
        swept = env.run_process("sweep", "--json")
        assert swept.code == 0, swept.stderr
    status = b.run_process("status", "--all", "--json")
    assert status.code == 0, status.stderr
    sessions = status.json()
    assert sessions, "no session recorded"
    for session in sessions:
        assert session["state"] not in ("issuing",), session
        for credential in session["credentials"]:
            assert credential["state"] not in ("minting", "pending"), (session["session"], credential)
        if session["state"] == "active":
            assert all(c["state"] == "active" for c in session["credentials"]), session
    states = {s["session"]: s["state"] for s in sessions}
    for session_id in live_sessions(openbao):  # a token OpenBao holds belongs to a session the store holds active
        assert states.get(session_id) == "active", (session_id, states.get(session_id))
    revoked = c.run_process("revoke", "--task", TASK_NAME, "--json")
    assert revoked.code in (0, 2), revoked.stderr  # 2: nothing was left live
    assert live_sessions(openbao) == {}
    for env in hosts:  # the owning hosts wipe the directories of what another host revoked
        assert env.run_process("sweep").code == 0
        assert env.session_dirs() == [], env.session_dirs()
        verified = env.run_process("audit", "verify")
        assert verified.code == 0, verified.stderr
    for env in hosts:  # and the fleet works as before
        issued = env.run_process("issue", "--task", str(env.root / "task.yaml"), "--json")
        assert issued.code == 0, issued.stderr
        assert a.run_process("revoke", "--session", issued.json()["session"]).code == 0


def live_sessions(openbao: OpenBao) -> dict[str, int]:
    """This test's broker sessions that still hold a live OpenBao token, with how many."""
    found: dict[str, int] = {}
    for accessor in openbao.accessors():
        try:
            meta = openbao.lookup(accessor).get("meta") or {}
        except Exception:  # noqa: S112 - revoked between list and lookup
            continue
        if not isinstance(meta, dict) or meta.get("broker_task") != TASK_NAME:
            continue
        session = meta.get("broker_session")
        if session:
            found[session] = found.get(session, 0) + 1
    return found


def assert_one_store_error(result: Result, what: str = "") -> None:
    """A failure the store caused: one ``broker: error:`` line naming it, never a traceback."""
    what = what or f"exit {result.code}: {result.stderr!r}"
    assert "Traceback" not in result.stdout + result.stderr, what
    errors = [line for line in result.stderr.splitlines() if line.startswith("broker: error:")]
    assert len(errors) == 1, what
    assert "session store postgresql://" in errors[0], what


def only_session(fleet: Fleet, state: str) -> str:
    rows = fleet.rows(f"SELECT id FROM sessions WHERE state = '{state}'")  # noqa: S608 - the test's own constants
    assert len(rows) == 1, rows
    return str(rows[0][0])


def test_a_revoke_that_loses_the_store_mid_way_says_so_and_sweep_finishes_it(fleet: Fleet, openbao: OpenBao) -> None:
    """Vault revoked the token, then the store could not record it: exit 2 (not a false "pending"), sweep settles."""
    a, b, _ = fleet.envs
    session = a.run_process("issue", "--task", str(a.root / "task.yaml"), "--json").json()["session"]
    with slow_proxy(urlparse(openbao.addr).port or 0, 5, hold=b"revoke-accessor") as proxy:
        reach_vault_through([b], proxy.addr)
        process = start_broker(b, "revoke", "--session", session, "--json")
        try:
            wait_for(proxy.held.is_set)
            stop_server(fleet.server, "fast")
            assert process.poll() is None, "the revoke ended before the store went away"
            out, err = process.communicate(timeout=90)
        finally:
            process.kill()
            start_server(fleet.server)
    assert process.returncode == StoreError.exit_code, err
    assert_one_store_error(Result(process.returncode, out, err))
    assert tokens_of(openbao, session) == []  # Vault did revoke it
    assert only_session(fleet, "revoking") == session
    reach_vault_through([b], openbao.addr)
    swept = b.run_process("sweep", "--json")
    assert swept.code == 0, swept.stderr
    assert swept.json()["recovered"] == [session]
    assert a.run_process("status", "--all", "--json").json()[0]["state"] == "revoked"
    assert a.run_process("sweep").code == 0 and a.session_dirs() == []


def test_a_session_lock_lost_with_its_connection_stops_its_holder(fleet: Fleet, openbao: OpenBao) -> None:
    """The server ends the connection holding host-a's session lock while its issue checks its new token: host-c's
    sweep may then take the session over, so host-a must not go on to hand the session out as if it held it."""
    a, _, c = fleet.envs
    with slow_proxy(urlparse(openbao.addr).port or 0, 8, hold=b"lookup-accessor") as proxy:
        reach_vault_through([a], proxy.addr)
        process = start_broker(a, "issue", "--task", str(a.root / "task.yaml"), "--json")
        try:
            wait_for(proxy.held.is_set)
            session = only_session(fleet, "issuing")
            ended = fleet.rows(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            assert ended == [(True,)]  # host-a's session lock, the only advisory lock held
            swept = c.run_process("sweep", "--json")
            assert process.poll() is None, "the issue ended before host-c's sweep"
            out, err = process.communicate(timeout=90)
        finally:
            process.kill()
    assert swept.code == 0, swept.stderr
    assert swept.json()["recovered"] == [session]  # the lock was free: host-c took the session over
    assert process.returncode == IssueRolledBack.exit_code, out + err
    assert_one_store_error(Result(process.returncode, out, err))
    assert "run broker sweep" in err
    reach_vault_through([a], openbao.addr)
    assert a.run_process("sweep").code == 0
    state = c.run_process("status", "--all", "--json").json()[0]
    assert state["state"] in ("revoked", "failed") and state["credentials"][0]["state"] != "active", state
    assert tokens_of(openbao, session) == []
    assert a.session_dirs() == []


def start_broker(env: BrokerEnv, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "broker.cli", "--config", str(env.config_path), *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
