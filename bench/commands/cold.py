"""The cold-start figure: `broker --version`, `--help` and the thin client's `broker status` vs `python -c pass`.

Every variant runs in the same loop, in a new random order each round, so
both sides of each ratio meet the same machine load. The thin client talks to
a real ``broker serve`` started here (no provider: ``status`` needs none),
once with ``BROKER_SOCKET`` set and once finding ``[daemon] socket`` in the
config file, as a fleet installation does (SPEC.md, "Operators at scale":
at most 2x ``python -c pass``).
"""

from __future__ import annotations

import contextlib
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.common import BROKER, PYTHON, Report, Row, Settings, median, must, run, summary
from bench.local import base_env

BASELINE = "python -c pass"
THIN = ("broker status, thin client (BROKER_SOCKET)", "broker status, thin client ([daemon] socket)")


@contextlib.contextmanager
def daemon(env: dict[str, str]) -> Iterator[tuple[Path, Path]]:
    """A ``broker serve`` on a socket of its own; the config file naming it and the socket."""
    work = Path(tempfile.mkdtemp(prefix="broker-bench-cold-"))
    (work / "policies").mkdir()
    sock = work / "broker.sock"
    config = work / "broker.toml"
    config.write_text(
        f'state_dir = "{work}/state"\nruntime_dir = "{work}/run"\npolicy_dir = "{work}/policies"\n'
        f'audit_key = "{work}/audit.key"\nfingerprint_key = "{work}/fingerprint.key"\n\n[daemon]\nsocket = "{sock}"\n'
    )
    process = subprocess.Popen([BROKER, "--config", str(config), "serve"], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not sock.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the bench's broker serve did not start")
            time.sleep(0.05)
        yield config, sock
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(work, ignore_errors=True)


def figure_cold(settings: Settings, report: Report) -> None:
    env = {key: value for key, value in base_env().items() if key not in ("BROKER_SOCKET", "BROKER_CONFIG")}
    with daemon(env) as (config, sock):
        variants: dict[str, tuple[list[str], dict[str, str]]] = {
            BASELINE: ([PYTHON, "-c", "pass"], env),
            "broker --version": ([BROKER, "--version"], env),
            "broker --help": ([BROKER, "--help"], env),
            "python -m broker.cli --version": ([PYTHON, "-m", "broker.cli", "--version"], env),
            "python -m broker.cli --help": ([PYTHON, "-m", "broker.cli", "--help"], env),
            THIN[0]: ([BROKER, "status"], {**env, "BROKER_SOCKET": str(sock)}),
            THIN[1]: ([BROKER, "--config", str(config), "status"], env),
        }
        for cmd, cmd_env in variants.values():  # warm the page cache and the bytecode caches
            for _ in range(2):
                must(run(cmd, env=cmd_env), " ".join(cmd[-2:]))
        samples: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for _ in range(settings.cold_reps):
            random.shuffle(names)
            for name in names:
                cmd, cmd_env = variants[name]
                samples[name].append(must(run(cmd, env=cmd_env), name).seconds)
    base = median(samples[BASELINE])
    for name in variants:
        if name == BASELINE:
            continue
        value = median(samples[name])
        ratio = value / base
        limit = 2 if name in THIN else 3
        report.add(
            Row(
                "cold",
                f"cold: {name} / {BASELINE}",
                round(ratio, 2),
                "x",
                f"<= {limit}x",
                ratio <= limit,
                f"({value * 1000:.0f} ms vs {base * 1000:.0f} ms)",
                {"ratio": ratio, "broker": summary(samples[name]), "baseline": summary(samples[BASELINE])},
            )
        )
