"""The thin client imports only what one request and one answer need (SPEC.md, "Operators at scale").

A real ``broker serve`` answers; the client runs as the console script does.
Not timings (``scripts/bench`` measures the cold start against ``python -c
pass``): the modules, so that argparse, typer, h11, dataclasses (and inspect
behind it), typing or pathlib coming back onto the client's path fails here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv

HEAVY = (
    "argparse", "typer", "click", "pydantic", "h11", "dataclasses", "inspect", "pathlib", "urllib",
    "yaml", "psycopg", "rich", "broker.core", "broker.cli.app", "broker.cli.typed", "providers",
)  # fmt: skip


@pytest.fixture
def serving(broker_env: BrokerEnv, tmp_path: Path) -> Iterator[Path]:
    """A ``broker serve`` of ``broker_env`` on a socket of its own."""
    sock = tmp_path / "broker.sock"
    broker_env.tables["daemon"] = {"socket": str(sock)}
    broker_env.write_config()
    process = subprocess.Popen(
        [sys.executable, "-m", "broker", "--config", str(broker_env.config_path), "serve"], stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while not _connects(sock):
            assert process.poll() is None and time.monotonic() < deadline, "broker serve did not start"
            time.sleep(0.05)
        yield sock
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def _connects(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def client(args: list[str], env: dict[str, str]) -> tuple[int, str, str, set[str]]:
    """``broker ARGS`` as the console script runs it: exit code, stdout, stderr, the modules it loaded."""
    program = (
        "import sys\nfrom broker.entry import run\n"
        f"sys.argv = ['broker', *{args!r}]\n"
        "try:\n    run()\nexcept SystemExit as exit:\n    code = exit.code\n"
        "sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules)))\nsys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120)
    stderr, _, modules = done.stderr.rpartition("\nMODULES ")
    return done.returncode, done.stdout, stderr, set(modules.split())


def at_start() -> set[str]:
    """What this interpreter loads before any code runs (an editable install's finder loads pathlib, for one)."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys; print(' '.join(sys.modules))"], capture_output=True, text=True, check=True
    )
    return set(done.stdout.split())


def heavy(modules: set[str]) -> list[str]:
    own = modules - at_start()
    return sorted(m for m in own if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize(
    ("args", "code", "stdout"),
    [
        (["status"], 0, "no live sessions\n"),
        (["status", "--json"], 0, "[]\n"),
        (["renew", "--session", "s-aaaaaaaaaaaa"], 2, ""),
    ],
)
def test_the_thin_client_loads_one_request_and_one_answer(
    serving: Path, broker_env: BrokerEnv, args: list[str], code: int, stdout: str
) -> None:
    with_socket = {"PATH": os.environ["PATH"], "BROKER_SOCKET": str(serving)}
    with_config = {"PATH": os.environ["PATH"], "BROKER_CONFIG": str(broker_env.config_path)}
    for env in (with_socket, with_config):
        done, out, err, modules = client(args, env)
        assert (done, out) == (code, stdout), err
        assert "broker.daemon.transport" in modules  # it did go to the daemon
        assert heavy(modules) == []
    assert "tomllib" not in client(args, with_socket)[3]  # with BROKER_SOCKET the config is not even read
