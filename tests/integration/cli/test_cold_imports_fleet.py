"""A fleet host (``store = "postgresql://..."``): psycopg only for a command that opens the store, none through a daemon.

psycopg costs a cold ``issue`` or ``revoke`` some 65-90 ms before the first
query (SPEC.md, "Operators at scale"). With ``[daemon] socket`` configured the
session commands go to the daemon, which holds its connection; a command that
never opens the store (the policy's, a help page) does not load psycopg at all.
Modules, not timings: the bench measures the time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv

POSTGRES = ("psycopg", "broker.core.store.postgres")


def run_broker(args: list[str], env: dict[str, str]) -> tuple[int, str, set[str]]:
    """``broker ARGS`` through the console script's entry: its exit code, stderr and the modules it loaded."""
    program = (
        "import sys\nfrom broker.entry import run\n"
        f"sys.argv = ['broker', *{args!r}]\n"
        "try:\n    run()\nexcept SystemExit as exit:\n    code = exit.code\n"
        "sys.stdout.write('\\n'.join(sorted(sys.modules)))\nsys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120)
    return done.returncode, done.stderr, set(done.stdout.split())


def fleet_host(env: BrokerEnv, tmp_path: Path, *, daemon: bool) -> dict[str, str]:
    passfile = tmp_path / "pgpass"
    passfile.write_text("127.0.0.1:1:broker:broker:not-a-password\n")
    passfile.chmod(0o600)
    env.settings["store"] = "postgresql://broker@127.0.0.1:1/broker"  # nothing listens: opening it would fail
    env.settings["store_passfile"] = str(passfile)
    env.write_config()
    if daemon:
        with env.config_path.open("a") as config:
            config.write(f'\n[daemon]\nsocket = "{tmp_path / "absent.sock"}"\n')
    return {"PATH": os.environ["PATH"], "BROKER_CONFIG": str(env.config_path)}


def loaded(modules: set[str], prefixes: tuple[str, ...] = POSTGRES) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


@pytest.mark.parametrize(
    "args",
    [
        ["issue", "--task", "TASK", "--json"],
        ["revoke", "--session", "s-aaaaaaaaaaaa"],
        ["revoke", "--task", "fix-1"],
        ["status", "--json"],
        ["renew", "--session", "s-aaaaaaaaaaaa"],
        ["policy", "check", "--task", "TASK"],
    ],
)
def test_with_a_daemon_a_fleet_hosts_session_commands_go_to_it_without_psycopg(
    broker_env: BrokerEnv, tmp_path: Path, args: list[str]
) -> None:
    task = broker_env.write_task("version: 1\ntask: fix-1\ncredentials: []\n")
    env = fleet_host(broker_env, tmp_path, daemon=True)
    code, stderr, modules = run_broker([str(task) if a == "TASK" else a for a in args], env)
    assert code == 7, stderr  # the daemon's, never direct mode: it is not there
    assert stderr.startswith("broker: error: cannot reach the broker daemon at "), stderr
    assert "broker.daemon.transport" in modules  # the measurement sees the client's own imports
    assert loaded(modules) == []


@pytest.mark.parametrize(
    "args", [["policy", "check", "--task", "TASK"], ["policy", "lint"], ["issue", "--help"], ["--help"]]
)
def test_a_command_that_does_not_open_the_store_loads_no_psycopg(
    broker_env: BrokerEnv, tmp_path: Path, args: list[str]
) -> None:
    task = broker_env.write_task("version: 1\ntask: fix-1\ncredentials: []\n")
    env = fleet_host(broker_env, tmp_path, daemon=False)
    code, stderr, modules = run_broker([str(task) if a == "TASK" else a for a in args], env)
    assert code in (0, 2, 3) and "store" not in stderr, stderr  # it answered (the bare policy's provider is absent)
    assert loaded(modules) == []


def test_without_a_daemon_a_fleet_command_opens_the_store_itself(broker_env: BrokerEnv, tmp_path: Path) -> None:
    """The premise of the two above: direct, ``status`` does load psycopg (and fails on the absent server)."""
    env = fleet_host(broker_env, tmp_path, daemon=False)
    code, stderr, modules = run_broker(["status", "--json"], env)
    assert code == 2 and "session store" in stderr, stderr
    assert "psycopg" in modules
