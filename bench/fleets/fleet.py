"""The fleet figure: three broker hosts on one PostgreSQL store, and what that store costs per call.

Starts a PostgreSQL of its own (``devstack.postgres``) beside the local
stack, then:

  cycles    3 hosts (own config, state and runtime dirs; one store) x N concurrent ``issue`` + ``revoke`` of
            the stack task, all at once; failures, wall time, ``audit verify`` on each host, live sessions
            left, revoked AWS sessions found in the role's deny policy (every host writes it)
  overhead  ``issue`` and ``revoke`` with the PostgreSQL store minus the same on the embedded SQLite store,
            medians (wall and CPU), the two installations alternating in one run (goal <= 15 ms each): once
            as a command per call (each pays ``import psycopg`` and a connection), once through
            ``broker serve`` daemons (the thin client; the daemon keeps its connection)
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from bench.common import WORK, Report, Row, Settings, median, run, summary
from bench.local import BrokerSetup, Stack, base_env
from devstack.postgres import FleetDb, create_fleet_db, start_postgres, stop_postgres

HOSTS = ("host-a", "host-b", "host-c")
VERBS = ("issue", "revoke")
OVERHEAD_GOAL_MS = 15.0


def figure_fleet(settings: Settings, report: Report, stack: Stack) -> None:
    n = settings.concurrency
    server = start_postgres(max_connections=len(HOSTS) * n + 40)  # one connection per broker process
    try:
        folder = WORK / "fleet-db"
        folder.mkdir(mode=0o700, exist_ok=True)
        db = create_fleet_db(server, folder)
        _cycles(report, stack, db, n)
        _overhead(settings, report, stack, create_fleet_db(server, folder))
    finally:
        stop_postgres(server)


def fleet_setup(name: str, stack: Stack, db: FleetDb, host: str) -> BrokerSetup:
    extra = {"store": db.url, "store_passfile": str(db.passfile), "host": host}
    return BrokerSetup(name, stack).create(extra=extra)


def _cycles(report: Report, stack: Stack, db: FleetDb, n: int) -> None:
    env = base_env()
    setups = [fleet_setup(f"fleet-{host}", stack, db, host) for host in HOSTS]
    stack.reset_deny()
    for setup in setups:  # warm-up: audit keys, the schema, keepsafe mounts
        ran, session = setup.issue(env)
        if not session or setup.revoke(session, env)[1]:
            raise RuntimeError(f"warm-up cycle on {setup.name} failed: {ran.first_error()}")
    stack.reset_deny()
    barrier = threading.Barrier(len(setups) * n)
    cycles: list[dict[str, Any]] = []
    guard = threading.Lock()

    def cycle(setup: BrokerSetup) -> None:
        barrier.wait()
        start = time.perf_counter()
        result: dict[str, Any] = {"host": setup.name, "ok": False}
        ran, session = setup.issue(env)
        if not session:
            result["error"] = f"issue exit {ran.code}: {ran.first_error()}"
        else:
            revoked, problem = setup.revoke(session, env)
            result["ok"] = not problem
            if problem:
                result["error"] = f"revoke exit {revoked.code}: {problem}"
        result["seconds"] = time.perf_counter() - start
        with guard:
            cycles.append(result)

    threads = [threading.Thread(target=cycle, args=(setup,)) for setup in setups for _ in range(n)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = time.perf_counter() - start
    verified = {setup.name: run(setup.cmd("audit", "verify"), env=env).code == 0 for setup in setups}
    status = run(setups[0].cmd("status", "--json"), env=env)
    try:
        live = len(json.loads(status.stdout))
    except ValueError:
        live = -1
    failures = [c for c in cycles if not c["ok"]]
    reasons = sorted({c.get("error", "?") for c in failures})
    # The store keeps the warm-ups' entries too, and every write is the whole policy the store makes.
    denied, ok_cycles = stack.denied_userids(), len(cycles) - len(failures) + len(setups)
    count = f"{len(HOSTS)} hosts x {n}"
    data = {"cycle_seconds": summary([c["seconds"] for c in cycles]), "reasons": reasons, "verified": verified}
    report.add(Row("fleet", f"fleet: {count} concurrent issue+revoke, wall", round(total, 2), "s", "", None, "", data))
    report.add(
        Row("fleet", "fleet: failed cycles", len(failures), f"of {len(cycles)}", "0", not failures, "; ".join(reasons))
    )
    report.add(
        Row(
            "fleet",
            "fleet: audit verify on every host, live sessions left",
            "pass" if all(verified.values()) and live == 0 else "FAIL",
            "",
            "pass",
            all(verified.values()) and live == 0,
            f"(verify {verified}; live sessions left {live})",
        )
    )
    report.add(
        Row(
            "fleet",
            "fleet: revoked AWS sessions found in the shared role's deny policy",
            f"{denied}/{ok_cycles}",
            "",
            "all",
            denied == ok_cycles,
            "(the three hosts write one role's policy; warm-up cycles included)",
        )
    )


def _overhead(settings: Settings, report: Report, stack: Stack, db: FleetDb) -> None:
    for daemon in (False, True):
        setups = {
            "sqlite": BrokerSetup(f"fleet-sqlite{'-d' if daemon else ''}", stack).create(),
            "postgresql": fleet_setup(f"fleet-postgresql{'-d' if daemon else ''}", stack, db, "host-a"),
        }
        with serving(setups.values(), daemon):
            _alternate(settings, report, stack, setups, "through broker serve" if daemon else "a command per call")


@contextlib.contextmanager
def serving(setups: Iterable[BrokerSetup], daemon: bool) -> Iterator[None]:
    """With ``daemon``: a ``broker serve`` per installation, its commands then thin clients of it."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        for setup in setups if daemon else ():
            socket = setup.dir / "broker.sock"
            with setup.config.open("a") as config:
                config.write(f'\n[daemon]\nsocket = "{socket}"\n')
            started.append(subprocess.Popen(setup.cmd("serve"), env=base_env(), stderr=subprocess.DEVNULL))
            deadline = time.monotonic() + 60
            while not socket.exists():
                if time.monotonic() > deadline or started[-1].poll() is not None:
                    raise RuntimeError(f"broker serve for {setup.name} did not start")
                time.sleep(0.05)
        yield
    finally:
        for process in started:
            process.send_signal(signal.SIGTERM)
            process.wait(60)


def _alternate(settings: Settings, report: Report, stack: Stack, setups: dict[str, BrokerSetup], how: str) -> None:
    env = base_env()
    samples: dict[str, dict[str, list[float]]] = {name: {v: [] for v in VERBS} for name in setups}
    cpu: dict[str, dict[str, list[float]]] = {name: {v: [] for v in VERBS} for name in setups}

    def cycle(name: str, record: bool) -> None:
        stack.reset_deny()
        setup = setups[name]
        ran, session = setup.issue(env)
        if not session:
            raise RuntimeError(f"{name} issue failed: {ran.first_error()}")
        revoked, problem = setup.revoke(session, env)
        if problem:
            raise RuntimeError(f"{name} revoke of {session}: {problem}")
        if record:
            for verb, done in (("issue", ran), ("revoke", revoked)):
                samples[name][verb].append(done.seconds)
                cpu[name][verb].append(done.cpu)

    for name in setups:
        cycle(name, False)  # warm-up
    names = list(setups)
    for rep in range(settings.fleet_reps):
        for name in names if rep % 2 == 0 else reversed(names):
            cycle(name, True)
    for verb in VERBS:
        ours, base = median(samples["postgresql"][verb]), median(samples["sqlite"][verb])
        added = (ours - base) * 1000
        added_cpu = (median(cpu["postgresql"][verb]) - median(cpu["sqlite"][verb])) * 1000
        report.add(
            Row(
                "fleet",
                f"fleet: {verb} on PostgreSQL minus on SQLite, {how} (median)",
                round(added, 1),
                "ms",
                f"<= {OVERHEAD_GOAL_MS:.0f} ms",
                added <= OVERHEAD_GOAL_MS,
                f"({ours * 1000:.0f} ms vs {base * 1000:.0f} ms wall, {settings.fleet_reps} alternating runs each;"
                f" client CPU {added_cpu:+.0f} ms)",
                {
                    "postgresql": summary(samples["postgresql"][verb]),
                    "sqlite": summary(samples["sqlite"][verb]),
                    "postgresql_cpu": summary(cpu["postgresql"][verb]),
                    "sqlite_cpu": summary(cpu["sqlite"][verb]),
                },
            )
        )
