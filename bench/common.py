"""Shared parts of the benchmark: paths, settings, results, and running processes."""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack.aws import ACCOUNT, REGION, ROLE_NAME
from devstack.github import APP_ID, OWNER
from devstack.stack import ROOT

RESULTS = ROOT / "bench-results"
WORK = RESULTS / "work"
PYTHON = sys.executable
BROKER = str(Path(PYTHON).parent / "broker")
#: Run by path, so it pays no imports but its own; bench/ is then first on its sys.path, so no module here may
#: share a name with the standard library's (``concurrent`` did).
FLOOR = str(ROOT / "bench" / "floor.py")
SEED = ("-m", "bench.seed")
FIGURES = (
    "cold",
    "issue",
    "revoke",
    "concurrent",
    "sweep",
    "memory",
    "audit",
    "egress",
    "dynamic",
    "daemon",
    "fleetlog",
    "latency",
    "fleet",
    "fleetrevoke",
    "operations",
    "terminated",
    "mcp",
    "evidence",
    "rotation",
    "longsession",
    "metrics",
    "awsproxy",
    "approvals",
    "gateway",
    "oauthrefresh",
    "containers",
    "identity",
)
#: egress, dynamic and daemon start what they need themselves (a proxy, OpenBao + PostgreSQL, OpenBao + a daemon).
NEEDS_STACK = {
    "issue",
    "revoke",
    "concurrent",
    "sweep",
    "memory",
    "latency",
    "fleet",
    "fleetrevoke",
}  # fleet and fleetrevoke add a PostgreSQL of their own

BROKER_ROLE = ROLE_NAME  # the stack task's role
FLOOR_ROLE = "agent-floor"  # the floor writes its deny policy here, so the two never share a document
__all__ = ["ACCOUNT", "APP_ID", "OWNER", "REGION", "ROOT"]
MOTO_IDENTITY = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}

SWEEP_TASK = """\
version: 1
task: fix-sweep-bench
ttl: 3s
sandbox: {uid: 1000, gid: 1000, mount_path: /run/secrets}
credentials:
  - name: kv
    provider: vault
    policies: [ci-read]
    ttl: 3s
    num_uses: 5
"""


@dataclass(frozen=True)
class Settings:
    quick: bool
    cold_reps: int
    cycle_reps: int
    concurrency: int
    concurrent_runs: int
    sweep_sessions: int
    sweep_reps: int
    seed_processes: int
    memory_reps: int
    audit_records: int
    audit_checkpoint_every: int
    audit_reps: int
    egress_requests: int
    egress_tunnels: int
    egress_mib: int
    egress_rounds: int
    dynamic_runs: int
    dynamic_rtt: int
    daemon_runs: int
    daemon_cycles: int
    latency_runs: int
    latency_rtt: int
    fleet_reps: int

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        quick = bool(args.quick)

        def pick(value: int | None, full: int, smoke: int) -> int:
            return value if value is not None else (smoke if quick else full)

        return cls(
            quick=quick,
            cold_reps=pick(args.cold_reps, 21, 5),
            cycle_reps=pick(args.reps, 9, 3),
            concurrency=pick(args.concurrency, 32, 8),
            concurrent_runs=pick(args.concurrent_runs, 5, 1),
            sweep_sessions=pick(args.sweep_sessions, 1000, 100),
            sweep_reps=pick(args.sweep_reps, 5, 1),
            seed_processes=pick(args.seed_processes, 4, 2),
            memory_reps=pick(args.memory_reps, 7, 3),
            audit_records=pick(args.audit_records, 1_000_000, 100_000),
            audit_checkpoint_every=args.audit_checkpoint_every,
            audit_reps=pick(args.audit_reps, 5, 3),
            egress_requests=pick(args.egress_requests, 1000, 100),
            egress_tunnels=pick(args.egress_tunnels, 64, 8),
            egress_mib=pick(args.egress_mib, 10, 2),
            egress_rounds=pick(args.egress_rounds, 5, 2),
            dynamic_runs=pick(args.dynamic_runs, 15, 3),
            dynamic_rtt=args.dynamic_rtt,
            daemon_runs=pick(args.daemon_runs, 15, 3),
            daemon_cycles=pick(args.daemon_cycles, 1000, 100),
            latency_runs=pick(args.latency_runs, 9, 3),
            latency_rtt=args.latency_rtt,
            fleet_reps=pick(args.fleet_reps, 21, 5),
        )


# -- results -------------------------------------------------------------------------------


@dataclass
class Row:
    figure: str  # the figure's group (cold, issue, ...)
    name: str
    value: float | int | str | None
    unit: str
    goal: str
    ok: bool | None  # None: no goal
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def shown_value(self) -> str:
        if isinstance(self.value, float):
            text = f"{self.value:.3g}" if self.value < 100 else f"{self.value:,.0f}"
        elif isinstance(self.value, int):
            text = f"{self.value:,}"
        else:
            text = str(self.value)
        return f"{text} {self.unit}".strip()


class Report:
    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.notes: list[str] = []
        self.errors: dict[str, str] = {}
        self.background: dict[str, float] = {}  # CPU busy fraction from other work before each figure
        self.load_at_start = [round(x, 2) for x in os.getloadavg()]

    def add(self, row: Row) -> None:
        self.rows.append(row)
        verdict = "" if row.ok is None else ("pass" if row.ok else "MISS")
        print(f"  -> {row.name}: {row.shown_value()}  {row.goal}  {verdict}  {row.detail}", flush=True)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summary(samples: Sequence[float]) -> dict[str, Any]:
    return {
        "median": round(median(samples), 6),
        "min": round(min(samples), 6) if samples else None,
        "max": round(max(samples), 6) if samples else None,
        "n": len(samples),
        "samples": [round(s, 6) for s in samples],
    }


# -- processes -----------------------------------------------------------------------------


@dataclass
class Ran:
    seconds: float
    code: int
    stdout: bytes
    stderr: bytes
    cpu: float = 0.0  # user+system seconds of finished children meanwhile (meaningful only when run alone)

    def first_error(self) -> str:
        lines = [line for line in self.stderr.decode(errors="replace").splitlines() if line.strip()]
        return (lines[-1] if lines else f"exit {self.code}")[:240]


def run(cmd: Sequence[str], *, env: dict[str, str], stdin: bytes | None = None, timeout: float = 900) -> Ran:
    before = children_cpu()
    start = time.perf_counter()
    done = subprocess.run(list(cmd), input=stdin, capture_output=True, env=env, cwd=ROOT, timeout=timeout, check=False)
    seconds = time.perf_counter() - start
    return Ran(seconds, done.returncode, done.stdout, done.stderr, children_cpu() - before)


def cpu_busy(seconds: float = 1.0) -> float:
    """Fraction of all CPUs busy over ``seconds`` (sampled while the bench itself idles: other work)."""

    def sample() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = values[3] + values[4]
        return sum(values) - idle, sum(values)

    busy0, total0 = sample()
    time.sleep(seconds)
    busy1, total1 = sample()
    return (busy1 - busy0) / max(total1 - total0, 1)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    """user+system seconds a running process has used so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def must(ran: Ran, what: str) -> Ran:
    if ran.code != 0:
        raise RuntimeError(f"{what} exited {ran.code}: {ran.first_error()}")
    return ran


MAXRSS_WRAPPER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    "sys.exit(code)\n"
)


def peak_rss_kib(cmd: Sequence[str], *, env: dict[str, str], out: Path) -> tuple[int, int]:
    """(ru_maxrss of ``cmd`` in KiB, exit code): a fresh wrapper so only this child counts."""
    done = subprocess.run([PYTHON, "-c", MAXRSS_WRAPPER, str(out), *cmd], env=env, cwd=ROOT, check=False)
    return int(out.read_text()), done.returncode


def git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def schedstat(pid: int | None) -> tuple[float, float]:
    """Seconds a process's threads ran, and waited runnable for a CPU (``/proc/PID/task/*/schedstat``)."""
    run = wait = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat") if pid is not None else ():
        with contextlib.suppress(OSError, ValueError):
            ran, waited, _ = stat.read_text().split()
            run, wait = run + int(ran), wait + int(waited)
    return run / 1e9, wait / 1e9
