"""The benchmark behind ``scripts/bench``: the broker's speed against the local stack, as figures with goals.

Starts OpenBao (dev server), a moto server and the GitHub App emulator on
loopback (each in a process of its own), then measures, each figure as a
median over repeated runs, both sides of a ratio interleaved in the same run:

  cold        ``broker --version`` / ``--help`` (entry point and ``python -m broker.cli``) vs ``python -c pass``
  issue       ``broker issue --json`` of the stack task vs ``scripts/bench_floor.py issue`` (same provider calls)
  revoke      ``broker revoke --json`` of that session vs ``scripts/bench_floor.py revoke``
  concurrent  N processes at once, each ``issue`` then ``revoke``; failures; ``audit verify`` afterwards
  sweep       one ``broker sweep`` over N expired Vault sessions (seeded through the Python API)
  memory      peak RSS of ``broker issue`` (ru_maxrss of the child)
  audit       ``audit verify`` and ``audit lookup`` on a 1,000,000-record log (built once, cached)

Prints a table and writes ``bench-results/bench-<git short sha>.json`` and
``bench-results/latest.json``. ``--quick`` for a smoke run, ``--only a,b``
for some figures. Everything the broker touches lives in
``bench-results/work/`` and is unmounted and removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from broker import mounts  # noqa: E402
from broker.durations import parse_duration  # noqa: E402
from tests.fixtures.github import rsa_key_pair  # noqa: E402
from tests.fixtures.net import free_port, wait_http  # noqa: E402
from tests.fixtures.openbao import ROOT_TOKEN, OpenBao, start_openbao, stop_openbao  # noqa: E402
from tests.fixtures.stack import STACK_POLICY, STACK_TASK  # noqa: E402

RESULTS = ROOT / "bench-results"
WORK = RESULTS / "work"
PYTHON = sys.executable
BROKER = str(Path(PYTHON).parent / "broker")
FLOOR = str(ROOT / "scripts" / "bench_floor.py")
SEED = str(ROOT / "scripts" / "bench_seed.py")
SERVERS = str(ROOT / "scripts" / "bench_servers.py")
FIGURES = ("cold", "issue", "revoke", "concurrent", "sweep", "memory", "audit")
NEEDS_STACK = {"issue", "revoke", "concurrent", "sweep", "memory"}

ACCOUNT = "123456789012"
REGION = "us-east-1"
BROKER_ROLE = "agent-ci"  # the stack task's role (tests/fixtures/aws.py)
FLOOR_ROLE = "agent-floor"  # the floor writes its deny policy here, so the two never share a document
APP_ID = 424242
OWNER = "octo-org"
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


# -- the local stack -----------------------------------------------------------------------


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


class Stack:
    """OpenBao dev server, moto server and the GitHub App emulator, each its own process."""

    def __init__(self) -> None:
        self.bao: OpenBao | None = None
        self.children: list[subprocess.Popen[bytes]] = []
        self.aws_url = ""
        self.github_url = ""
        self.private_pem = b""
        self.role_ids: dict[str, str] = {}

    def start(self) -> None:
        self.bao = start_openbao()
        moto_port = free_port()
        self.children.append(
            subprocess.Popen([PYTHON, SERVERS, "moto", str(moto_port)], stdout=subprocess.DEVNULL, cwd=ROOT)
        )
        self.aws_url = f"http://127.0.0.1:{moto_port}"
        wait_http(f"{self.aws_url}/moto-api/")
        keys = rsa_key_pair()
        self.private_pem = keys.private_pem
        public = WORK / "github-app.pub.pem"
        public.write_bytes(keys.public_pem)
        github_port = free_port()
        installation = f"{OWNER}:widgets,docs-site:contents=write,pull_requests=write,metadata=read"
        self.children.append(
            subprocess.Popen(
                [
                    PYTHON,
                    "-m",
                    "tests.emulators.github_app",
                    "--port",
                    str(github_port),
                    "--app-id",
                    str(APP_ID),
                    "--public-key",
                    str(public),
                    "--installation",
                    installation,
                ],
                stdout=subprocess.DEVNULL,
                cwd=ROOT,
            )
        )
        self.github_url = f"http://127.0.0.1:{github_port}"
        wait_port(github_port)
        iam = self.iam()
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                    "Action": ["sts:AssumeRole", "sts:TagSession", "sts:SetSourceIdentity"],
                }
            ],
        }
        for name in (BROKER_ROLE, FLOOR_ROLE):
            role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust), MaxSessionDuration=3600)
            self.role_ids[name] = role["Role"]["RoleId"]

    def iam(self) -> Any:
        import boto3

        return boto3.client("iam", endpoint_url=self.aws_url, region_name=REGION, **MOTO_IDENTITY)

    def reset_deny(self) -> None:
        """Drop both roles' deny policies, so repeated revocations never fill IAM's 10,240-char budget."""
        iam = self.iam()
        for role in (BROKER_ROLE, FLOOR_ROLE):
            with contextlib.suppress(iam.exceptions.NoSuchEntityException):
                iam.delete_role_policy(RoleName=role, PolicyName="BrokerRevokedSessions")

    def server_cpu(self) -> dict[str, float]:
        """CPU seconds each server process has used so far."""
        pids = {"openbao": self.bao.process.pid if self.bao else 0}
        pids.update({name: child.pid for name, child in zip(("moto", "github"), self.children, strict=False)})
        return {name: process_cpu(pid) for name, pid in pids.items()}

    def denied_userids(self, role: str = BROKER_ROLE) -> int:
        """How many aws:userid values the role's deny policy holds (one per revoked AWS credential)."""
        iam = self.iam()
        try:
            document = iam.get_role_policy(RoleName=role, PolicyName="BrokerRevokedSessions")["PolicyDocument"]
        except iam.exceptions.NoSuchEntityException:
            return 0
        values: set[str] = set()
        for statement in document.get("Statement", []):
            found = statement.get("Condition", {}).get("StringEquals", {}).get("aws:userid", [])
            values.update([found] if isinstance(found, str) else found)
        return len(values)

    def deny_policy_size(self, role: str = BROKER_ROLE) -> int:
        iam = self.iam()
        try:
            document = iam.get_role_policy(RoleName=role, PolicyName="BrokerRevokedSessions")["PolicyDocument"]
        except iam.exceptions.NoSuchEntityException:
            return 0
        return len(json.dumps(document, separators=(",", ":")))

    def stop(self) -> None:
        for child in self.children:
            child.terminate()
        for child in self.children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        if self.bao is not None:
            stop_openbao(self.bao)


def base_env() -> dict[str, str]:
    """A clean environment: the broker's own AWS identity as moto's dummy keys, nothing from ~/.aws."""
    home = WORK / "home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "AWS_ACCESS_KEY_ID": MOTO_IDENTITY["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": MOTO_IDENTITY["aws_secret_access_key"],
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(WORK / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(WORK / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@dataclass
class BrokerSetup:
    """One broker installation under ``bench-results/work/<name>``: config, policy, task, secrets."""

    name: str
    stack: Stack

    @property
    def dir(self) -> Path:
        return WORK / self.name

    @property
    def config(self) -> Path:
        return self.dir / "broker.toml"

    @property
    def task(self) -> Path:
        return self.dir / "task.yaml"

    def create(self, task: str = STACK_TASK) -> BrokerSetup:
        unmount_under(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(mode=0o700, parents=True)
        (self.dir / "policies").mkdir()
        (self.dir / "policies" / "agents.yaml").write_text(textwrap.dedent(STACK_POLICY))
        self.task.write_text(textwrap.dedent(task))
        for name, data in (("vault-token", ROOT_TOKEN.encode()), ("github-app.pem", self.stack.private_pem)):
            path = self.dir / name
            path.write_bytes(data)
            path.chmod(0o600)
        assert self.stack.bao is not None
        self.config.write_text(
            textwrap.dedent(f"""\
            state_dir = "{self.dir / "state"}"
            runtime_dir = "{self.dir / "run"}"
            policy_dir = "{self.dir / "policies"}"
            audit_key = "{self.dir / "audit.key"}"

            [providers.vault]
            type = "vault"
            addr = "{self.stack.bao.addr}"
            token_file = "{self.dir / "vault-token"}"
            token_role = "broker-session"

            [providers.aws]
            type = "aws_sts"
            region = "{REGION}"
            endpoint_url = "{self.stack.aws_url}"

            [providers.github]
            type = "github_app"
            app_id = "{APP_ID}"
            private_key_file = "{self.dir / "github-app.pem"}"
            api_url = "{self.stack.github_url}"
            """)
        )
        return self

    def cmd(self, *args: str) -> list[str]:
        return [BROKER, "--config", str(self.config), *args]

    def issue(self, env: dict[str, str]) -> tuple[Ran, str]:
        ran = run(self.cmd("issue", "--task", str(self.task), "--json"), env=env)
        session = ""
        if ran.code == 0:
            with contextlib.suppress(ValueError, KeyError):
                session = json.loads(ran.stdout)["session"]
        return ran, session

    def revoke(self, session: str, env: dict[str, str]) -> tuple[Ran, str]:
        """The run and "" when every credential came back revoked and the directory went, else what did not."""
        ran = run(self.cmd("revoke", "--session", session, "--json"), env=env)
        problem = ""
        try:
            report = json.loads(ran.stdout)
            bad = [f"{c['name']}={c['outcome']}" for c in report["credentials"] if c["outcome"] != "revoked"]
            if bad or not report["dir_removed"]:
                problem = f"outcomes {bad}, dir_removed {report['dir_removed']}"
        except (ValueError, KeyError, TypeError):
            problem = ran.first_error()
        if ran.code != 0 and not problem:
            problem = ran.first_error()
        return ran, problem


def unmount_under(path: Path) -> None:
    prefix = str(path) + "/"
    for point in sorted(mounts.mount_points(), reverse=True):
        if point.startswith(prefix):
            with contextlib.suppress(OSError):
                mounts.unmount(Path(point))


def floor_params(stack: Stack, floor_dir: Path, setup: BrokerSetup) -> Path:
    """The floor's inputs: the stack task's credentials as the broker would mint them."""
    task = yaml.safe_load(STACK_TASK)
    by_type = {c["provider"]: c for c in task["credentials"]}
    github, aws, vault = by_type["github"], by_type["aws"], by_type["vault"]
    assert stack.bao is not None
    params = {
        "task": task["task"],
        "uid": task["sandbox"]["uid"],
        "gid": task["sandbox"]["gid"],
        "mount_path": task["sandbox"]["mount_path"],
        "floor_dir": str(floor_dir),
        "vault_addr": stack.bao.addr,
        "vault_token_file": str(setup.dir / "vault-token"),
        "vault_token_role": "broker-session",
        "vault_policies": vault["policies"],
        "vault_ttl": parse_duration(vault["ttl"], "ttl"),
        "vault_num_uses": vault["num_uses"],
        "aws_endpoint": stack.aws_url,
        "aws_region": REGION,
        "aws_role_arn": f"arn:aws:iam::{ACCOUNT}:role/{FLOOR_ROLE}",
        "aws_ttl": parse_duration(aws["ttl"], "ttl"),
        "aws_session_policy": aws["session_policy"],
        "github_api": stack.github_url,
        "github_app_id": str(APP_ID),
        "github_key_file": str(setup.dir / "github-app.pem"),
        "github_repositories": github["repositories"],
        "github_permissions": github["permissions"],
    }
    path = WORK / "floor-params.json"
    path.write_text(json.dumps(params, indent=1))
    return path


# -- figures -------------------------------------------------------------------------------


def figure_cold(settings: Settings, report: Report) -> None:
    env = base_env()
    variants = {
        "python -c pass": [PYTHON, "-c", "pass"],
        "broker --version": [BROKER, "--version"],
        "broker --help": [BROKER, "--help"],
        "python -m broker.cli --version": [PYTHON, "-m", "broker.cli", "--version"],
        "python -m broker.cli --help": [PYTHON, "-m", "broker.cli", "--help"],
    }
    for cmd in variants.values():  # warm the page cache and the bytecode caches
        for _ in range(2):
            must(run(cmd, env=env), " ".join(cmd[-2:]))
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for _ in range(settings.cold_reps):
        random.shuffle(names)
        for name in names:
            samples[name].append(must(run(variants[name], env=env), name).seconds)
    base = median(samples["python -c pass"])
    for name in variants:
        if name == "python -c pass":
            continue
        value = median(samples[name])
        ratio = value / base
        report.add(
            Row(
                "cold",
                f"cold: {name} / python -c pass",
                round(ratio, 2),
                "x",
                "<= 3x",
                ratio <= 3,
                f"({value * 1000:.0f} ms vs {base * 1000:.0f} ms)",
                {"ratio": ratio, "broker": summary(samples[name]), "baseline": summary(samples["python -c pass"])},
            )
        )


def figure_cycles(settings: Settings, report: Report, stack: Stack, wanted: set[str]) -> None:
    """Figures 2 and 3: issue and revoke, broker vs floor, interleaved in the same run."""
    env = base_env()
    setup = BrokerSetup("cycle", stack).create()
    floor_dir = Path("/dev/shm") / f"broker-bench-floor-{os.getpid()}"
    floor_dir.mkdir(mode=0o711, exist_ok=True)
    params = floor_params(stack, floor_dir, setup)
    kinds = ("broker_issue", "broker_revoke", "floor_issue", "floor_revoke")
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}

    def broker_cycle(record: bool) -> None:
        stack.reset_deny()
        ran, session = setup.issue(env)
        if not session:
            raise RuntimeError(f"broker issue failed: {ran.first_error()}")
        revoked, problem = setup.revoke(session, env)
        if problem:
            raise RuntimeError(f"broker revoke of {session}: {problem}")
        if record:
            samples["broker_issue"].append(ran.seconds)
            samples["broker_revoke"].append(revoked.seconds)
            cpu["broker_issue"].append(ran.cpu)
            cpu["broker_revoke"].append(revoked.cpu)

    def floor_cycle(record: bool) -> None:
        stack.reset_deny()
        ran = must(run([PYTHON, FLOOR, "issue", str(params)], env=env), "floor issue")
        directory = ran.stdout.decode().strip()
        revoked = must(run([PYTHON, FLOOR, "revoke", str(params), directory], env=env), "floor revoke")
        if record:
            samples["floor_issue"].append(ran.seconds)
            samples["floor_revoke"].append(revoked.seconds)
            cpu["floor_issue"].append(ran.cpu)
            cpu["floor_revoke"].append(revoked.cpu)

    try:
        broker_cycle(False)  # warm-up: audit key, store, keepsafe mount, bytecode caches
        floor_cycle(False)
        for rep in range(settings.cycle_reps):
            pair: list[Callable[[bool], None]] = [broker_cycle, floor_cycle]
            for cycle in pair if rep % 2 == 0 else reversed(pair):
                cycle(True)
    finally:
        shutil.rmtree(floor_dir, ignore_errors=True)
    for kind, label in (("issue", "broker issue --json / floor issue"), ("revoke", "broker revoke / floor revoke")):
        if kind not in wanted:
            continue
        ours, floor = median(samples[f"broker_{kind}"]), median(samples[f"floor_{kind}"])
        ratio = ours / floor
        report.add(
            Row(
                kind,
                f"{kind}: {label}",
                round(ratio, 2),
                "x",
                "<= 0.8x",
                ratio <= 0.8,
                f"({ours * 1000:.0f} ms vs {floor * 1000:.0f} ms wall; CPU"
                f" {median(cpu[f'broker_{kind}']) * 1000:.0f} ms vs {median(cpu[f'floor_{kind}']) * 1000:.0f} ms)",
                {
                    "ratio": ratio,
                    "broker": summary(samples[f"broker_{kind}"]),
                    "floor": summary(samples[f"floor_{kind}"]),
                    "broker_cpu": summary(cpu[f"broker_{kind}"]),
                    "floor_cpu": summary(cpu[f"floor_{kind}"]),
                },
            )
        )


def figure_concurrent(settings: Settings, report: Report, stack: Stack) -> None:
    env = base_env()
    runs: list[dict[str, Any]] = []
    for _ in range(settings.concurrent_runs):
        setup = BrokerSetup("concurrent", stack).create()
        stack.reset_deny()
        ran, session = setup.issue(env)  # warm-up: audit key, store schema, keepsafe mount
        if not session or setup.revoke(session, env)[1]:
            raise RuntimeError(f"warm-up cycle failed: {ran.first_error()}")
        stack.reset_deny()
        runs.append(_concurrent_run(setup, settings.concurrency, env, stack))
    totals = [r["total_seconds"] for r in runs]
    slowest = [r["slowest_cycle_seconds"] for r in runs]
    failures = sum(r["failures"] for r in runs)
    verified = all(r["audit_verify_ok"] for r in runs)
    live_left = sum(r["live_sessions_left"] for r in runs)
    n = settings.concurrency
    data = {"runs": runs, "total": summary(totals), "slowest": summary(slowest)}
    report.add(
        Row(
            "concurrent",
            f"concurrent: {n} issue+revoke cycles, total",
            round(median(totals), 2),
            "s",
            "",
            None,
            f"(median of {len(runs)} runs; {', '.join(f'{t:.1f}' for t in totals)})",
            data,
        )
    )
    report.add(
        Row(
            "concurrent",
            "concurrent: slowest cycle",
            round(median(slowest), 2),
            "s",
            "",
            None,
            f"(median of {len(runs)}; median cycle {median([median(r['cycle_seconds']) for r in runs]):.1f} s)",
        )
    )
    reasons = sorted({reason for r in runs for reason in r["failure_reasons"]})
    ok_cycles = [n - r["failures"] for r in runs]
    denied = [r["deny_userids"] for r in runs]
    report.add(
        Row(
            "concurrent",
            "concurrent: revoked AWS sessions found in the deny policy",
            f"{sum(denied)}/{sum(ok_cycles)}",
            "",
            "all",
            denied == ok_cycles,
            "(lost read-modify-write updates would leave revoked sessions usable)",
        )
    )
    cpu_total = [r["broker_cpu_seconds"] for r in runs]
    report.add(
        Row(
            "concurrent",
            "concurrent: broker CPU per cycle",
            round(median(cpu_total) / n, 2),
            "s",
            "",
            None,
            f"({median(cpu_total):.0f} CPU s per run on {os.cpu_count()} cpus;"
            f" servers {runs[-1]['servers_cpu_seconds']})",
        )
    )
    report.add(
        Row(
            "concurrent",
            "concurrent: failed cycles",
            failures,
            f"of {n * len(runs)}",
            "0",
            failures == 0,
            ("; ".join(reasons))[:400],
            {"reasons": reasons, "live_sessions_left": live_left},
        )
    )
    report.add(
        Row(
            "concurrent",
            "concurrent: audit verify afterwards",
            "pass" if verified else "FAIL",
            "",
            "pass",
            verified,
            f"(live sessions left: {live_left})",
        )
    )


def _concurrent_run(setup: BrokerSetup, n: int, env: dict[str, str], stack: Stack) -> dict[str, Any]:
    barrier = threading.Barrier(n)
    cycles: list[dict[str, Any]] = [{} for _ in range(n)]

    def cycle(index: int) -> None:
        barrier.wait()
        start = time.perf_counter()
        result: dict[str, Any] = {"ok": False}
        try:
            ran, session = setup.issue(env)
            result["issue_seconds"] = ran.seconds
            if not session:
                result["error"] = f"issue exit {ran.code}: {ran.first_error()}"
                return
            revoked, problem = setup.revoke(session, env)
            result["revoke_seconds"] = revoked.seconds
            if problem:
                result["error"] = f"revoke exit {revoked.code}: {problem}"
                return
            result["ok"] = True
        finally:
            result["seconds"] = time.perf_counter() - start
            cycles[index] = result

    threads = [threading.Thread(target=cycle, args=(i,)) for i in range(n)]
    servers_before = stack.server_cpu()
    cpu_before = children_cpu()
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = time.perf_counter() - start
    broker_cpu = children_cpu() - cpu_before
    servers_cpu = {name: round(v - servers_before.get(name, 0.0), 2) for name, v in stack.server_cpu().items()}
    verify = run(setup.cmd("audit", "verify"), env=env)
    status = run(setup.cmd("status", "--json"), env=env)
    try:
        live = len(json.loads(status.stdout))
    except ValueError:
        live = -1
    failures = [c for c in cycles if not c.get("ok")]
    result = {
        "total_seconds": round(total, 3),
        "slowest_cycle_seconds": round(max(c["seconds"] for c in cycles), 3),
        "cycle_seconds": [round(c["seconds"], 3) for c in cycles],
        "issue_seconds": summary([c["issue_seconds"] for c in cycles if "issue_seconds" in c]),
        "revoke_seconds": summary([c["revoke_seconds"] for c in cycles if "revoke_seconds" in c]),
        "failures": len(failures),
        "failure_reasons": sorted({c.get("error", "?") for c in failures}),
        "audit_verify_ok": verify.code == 0,
        "audit_verify_output": (verify.stdout or verify.stderr).decode(errors="replace").strip()[:300],
        "live_sessions_left": live,
        "deny_policy_chars": stack.deny_policy_size(),
        "deny_userids": stack.denied_userids(),
        "broker_cpu_seconds": round(broker_cpu, 2),
        "servers_cpu_seconds": servers_cpu,
    }
    print(
        f"     run: total {total:.1f} s, slowest {result['slowest_cycle_seconds']:.1f} s, failures {len(failures)},"
        f" verify {'ok' if verify.code == 0 else 'FAIL'}, live left {live}, AWS sessions in the deny policy"
        f" {result['deny_userids']}; broker CPU {broker_cpu:.1f} s, servers CPU {servers_cpu}; issue median"
        f" {result['issue_seconds']['median']:.1f} s, revoke median {result['revoke_seconds']['median']:.1f} s",
        flush=True,
    )
    return result


def figure_sweep(settings: Settings, report: Report, stack: Stack) -> None:
    env = base_env()
    n = settings.sweep_sessions
    reps: list[dict[str, Any]] = []
    for _ in range(settings.sweep_reps):
        setup = BrokerSetup("sweep", stack).create(SWEEP_TASK)
        started = time.perf_counter()
        rest = n - 1  # one more comes from the warm-up below
        per = [
            rest // settings.seed_processes + (1 if i < rest % settings.seed_processes else 0)
            for i in range(settings.seed_processes)
        ]
        must(run([PYTHON, SEED, str(setup.config), str(setup.task), "1"], env=env), "seed warm-up")  # key, store
        seeders = [
            subprocess.Popen(
                [PYTHON, SEED, str(setup.config), str(setup.task), str(count)],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for count in per
            if count
        ]
        issued = 0
        seed_errors: dict[str, int] = {}
        for seeder in seeders:
            out, err = seeder.communicate(timeout=1800)
            try:
                seeded = json.loads(out)
            except ValueError:
                raise RuntimeError(
                    f"seeding failed: {err.decode(errors='replace').strip().splitlines()[-1:]}"
                ) from None
            issued += seeded["issued"]
            for message, count in seeded["errors"].items():
                seed_errors[message] = seed_errors.get(message, 0) + count
        created = time.perf_counter() - started
        time.sleep(4.0)  # every session (ttl 3s) and its Vault token are past expiry now
        waited = time.perf_counter() - started - created
        ran = run(setup.cmd("sweep", "--json"), env=env, timeout=1800)
        try:
            outcome = json.loads(ran.stdout)
        except ValueError:
            outcome = {}
        expired = len(outcome.get("expired", []))
        pending = len(outcome.get("pending", []))
        reps.append(
            {
                "sessions": issued + 1,
                "seed_errors": seed_errors,
                "create_seconds": round(created, 3),
                "wait_seconds": round(waited, 3),
                "sweep_seconds": round(ran.seconds, 3),
                "exit": ran.code,
                "expired": expired,
                "pending": pending,
                "error": ran.first_error() if ran.code else "",
            }
        )
        print(
            f"     rep: created {issued + 1} sessions in {created:.1f} s (+{waited:.1f} s wait;"
            f" {sum(seed_errors.values())} refused and retried), sweep"
            f" {ran.seconds:.2f} s, expired {expired}, pending {pending}, exit {ran.code}",
            flush=True,
        )
        unmount_under(setup.dir)
    sweeps = [r["sweep_seconds"] for r in reps]
    value = median(sweeps)
    ok = all(r["exit"] == 0 and r["expired"] == r["sessions"] for r in reps)
    creation = sum(r["create_seconds"] for r in reps)
    report.add(
        Row(
            "sweep",
            f"sweep: {n} expired Vault sessions",
            round(value, 2),
            "s",
            "<= 20 s",
            value <= 20 and ok,
            f"(median of {len(reps)}; all expired: {ok}; seeding {creation:.0f} s in total, "
            f"{settings.seed_processes} processes via the Python API)",
            {"reps": reps, "sweep": summary(sweeps)},
        )
    )


def figure_memory(settings: Settings, report: Report, stack: Stack) -> None:
    env = base_env()
    setup = BrokerSetup("memory", stack).create()
    out = WORK / "maxrss"
    floor_dir = Path("/dev/shm") / f"broker-bench-floor-mem-{os.getpid()}"
    floor_dir.mkdir(mode=0o711, exist_ok=True)
    params = floor_params(stack, floor_dir, setup)
    ours: list[int] = []
    floor: list[int] = []
    bare: list[int] = []
    issue_cmd = setup.cmd("issue", "--task", str(setup.task), "--json", "--session-file", str(WORK / "mem-session"))
    try:
        must(setup.issue(env)[0], "warm-up issue")
        for _ in range(settings.memory_reps):
            stack.reset_deny()
            kib, code = peak_rss_kib(issue_cmd, env=env, out=out)
            if code != 0:
                raise RuntimeError(f"broker issue exited {code}")
            ours.append(kib)
            setup.revoke((WORK / "mem-session").read_text().strip(), env)
            kib, code = peak_rss_kib([PYTHON, FLOOR, "issue", str(params)], env=env, out=out)
            floor.append(kib)
            bare.append(peak_rss_kib([PYTHON, "-c", "pass"], env=env, out=out)[0])
    finally:
        for child in floor_dir.iterdir() if floor_dir.exists() else []:
            for root, dirs, _ in os.walk(child):
                for name in dirs:
                    os.chmod(os.path.join(root, name), 0o700)
            os.chmod(child, 0o700)
        shutil.rmtree(floor_dir, ignore_errors=True)
    value = median(ours) / 1024
    report.add(
        Row(
            "memory",
            "memory: broker issue peak RSS",
            round(value, 1),
            "MiB",
            "<= 80 MiB",
            value <= 80,
            f"(floor {median(floor) / 1024:.1f} MiB, python -c pass {median(bare) / 1024:.1f} MiB)",
            {"broker_kib": summary(ours), "floor_kib": summary(floor), "python_kib": summary(bare)},
        )
    )


# -- audit ---------------------------------------------------------------------------------

NEEDLE_SECRET = b"bench-needle-token-5f1c0ffee"
AUDIT_FORMAT = 1


def audit_dir(records: int, every: int) -> Path:
    return RESULTS / f"audit-{records}-cp{every}"


def build_audit_log(records: int, every: int) -> tuple[Path, float, bool]:
    """The cached log (built when absent): (directory, build seconds, reused)."""
    directory = audit_dir(records, every)
    meta_path = directory / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("format") == AUDIT_FORMAT and meta.get("records") == records:
            return directory, float(meta.get("build_seconds", 0)), True
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    start = time.perf_counter()
    _write_audit_log(directory, records, every)
    seconds = time.perf_counter() - start
    meta_path.write_text(
        json.dumps(
            {"format": AUDIT_FORMAT, "records": records, "checkpoint_every": every, "build_seconds": round(seconds, 2)}
        )
    )
    return directory, seconds, False


def _write_audit_log(directory: Path, records: int, every: int) -> None:
    """Records as ``broker issue``/``revoke`` append them, chained and checkpointed as broker/issuance_log.py does."""
    from broker.auditkeys import load_or_create_keys
    from broker.issuance_log import GENESIS, canonical, checkpoint_message, record_hash
    from broker.secret import Secret

    keys = load_or_create_keys(directory / "audit.key")
    (directory / "broker.pub").write_text("\n".join(keys.public_key_lines()) + "\n")
    (directory / "broker.toml").write_text(
        f'state_dir = "{directory / "state"}"\nruntime_dir = "{WORK / "audit-run"}"\n'
        f'policy_dir = "{directory / "policies"}"\naudit_key = "{directory / "audit.key"}"\n'
    )
    signer = keys.private_key()
    hmac_key = keys.hmac_key
    requester = "root(uid:0)"
    needle_session = records // 2 // 10
    clock = datetime(2026, 1, 1, tzinfo=UTC)
    prev, seq, session_no = GENESIS, 0, 0
    scopes = {
        "repo": (
            "github",
            "github_app",
            {"repositories": ["octo-org/widgets"], "permissions": {"contents": "write", "pull_requests": "write"}},
        ),
        "artifacts": (
            "aws",
            "aws_sts",
            {
                "role_arn": f"arn:aws:iam::{ACCOUNT}:role/agent-ci",
                "policy_arns": [],
                "session_policy": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::ci-artifacts/*"]}
                    ],
                },
            },
        ),
        "kv": ("vault", "vault", {"policies": ["ci-read"], "num_uses": 20}),
    }

    def stamp() -> str:
        return (clock + timedelta(milliseconds=seq * 37)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    with open(directory / "issuance.jsonl", "wb", buffering=8 << 20) as out:

        def emit(event: str, session: str | None, task: str | None, fields: dict[str, Any]) -> None:
            nonlocal prev, seq
            seq += 1
            record: dict[str, Any] = {
                "seq": seq,
                "time": stamp(),
                "event": event,
                "session": session,
                "task": task,
                "requester": requester,
                "prev": prev,
                **fields,
            }
            record["hash"] = record_hash(record)
            out.write(canonical(record) + b"\n")
            prev = record["hash"]
            if seq % every == 0 and seq < records:
                signature = signer.sign(checkpoint_message(seq, prev))
                import base64

                seq_fields = {
                    "head_seq": seq,
                    "head_hash": prev,
                    "key_id": keys.key_id,
                    "signature": base64.b64encode(signature).decode(),
                }
                seq += 1
                cp: dict[str, Any] = {
                    "seq": seq,
                    "time": stamp(),
                    "event": "checkpoint",
                    "session": None,
                    "task": None,
                    "requester": requester,
                    "prev": prev,
                    **seq_fields,
                }
                cp["hash"] = record_hash(cp)
                out.write(canonical(cp) + b"\n")
                prev = cp["hash"]

        while seq < records:
            session_no += 1
            session = f"s-{session_no:012d}"[-14:]
            task = f"fix-build-{session_no % 977}"
            expires = (clock + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
            names = ("repo", "artifacts", "kv")
            for name in names:
                provider, kind, scope = scopes[name]
                secret = (
                    NEEDLE_SECRET
                    if (session_no == needle_session and name == "kv")
                    else (f"{session}/{name}/{session_no * 7919}".encode())
                )
                emit(
                    "credential.issued",
                    session,
                    task,
                    {
                        "credential": name,
                        "provider": provider,
                        "type": kind,
                        "rule": "agents-widgets",
                        "scope": scope,
                        "expires_at": expires,
                        "reference": {"id": f"{name}-{session_no}"},
                        "fingerprint": Secret(secret).fingerprint(hmac_key),
                    },
                )
            emit(
                "session.issued",
                session,
                task,
                {"expires_at": expires, "credentials": list(names), "dir": f"/run/broker/{session}"},
            )
            for name in names:
                provider, kind, _ = scopes[name]
                emit(
                    "credential.revoked",
                    session,
                    task,
                    {
                        "credential": name,
                        "provider": provider,
                        "type": kind,
                        "reference": {"id": f"{name}-{session_no}"},
                        "reason": "revoke",
                        "outcome": "revoked",
                    },
                )
            emit(
                "session.revoked",
                session,
                task,
                {
                    "credentials": [{"name": n, "provider": scopes[n][0], "outcome": "revoked"} for n in names],
                    "dir_removed": True,
                },
            )
        # the log ends with a checkpoint, as every broker command that appended leaves it
        signature = signer.sign(checkpoint_message(seq, prev))
        import base64

        seq += 1
        final: dict[str, Any] = {
            "seq": seq,
            "time": stamp(),
            "event": "checkpoint",
            "session": None,
            "task": None,
            "requester": requester,
            "prev": prev,
            "head_seq": seq - 1,
            "head_hash": prev,
            "key_id": keys.key_id,
            "signature": base64.b64encode(signature).decode(),
        }
        final["hash"] = record_hash(final)
        out.write(canonical(final) + b"\n")


def figure_audit(settings: Settings, report: Report) -> None:
    env = base_env()
    n, every = settings.audit_records, settings.audit_checkpoint_every
    print(f"     log of ~{n:,} records (a checkpoint every {every}) ...", flush=True)
    directory, build, reused = build_audit_log(n, every)
    log = directory / "issuance.jsonl"
    lines = sum(1 for _ in open(log, "rb"))  # noqa: SIM115
    size_mib = log.stat().st_size / 2**20
    print(
        f"     {'reused' if reused else 'built'} {log} ({lines:,} records, {size_mib:.0f} MiB, build {build:.1f} s)",
        flush=True,
    )
    verify_cmd = [BROKER, "audit", "verify", "--log", str(log), "--public-key", str(directory / "broker.pub")]
    lookup_cmd = [
        BROKER,
        "--config",
        str(directory / "broker.toml"),
        "audit",
        "lookup",
        "--secret-stdin",
        "--log",
        str(log),
        "--json",
    ]
    must(run(verify_cmd, env=env), "audit verify (warm-up)")
    verify_s: list[float] = []
    lookup_s: list[float] = []
    found: list[int] = []
    for _ in range(settings.audit_reps):
        verify_s.append(must(run(verify_cmd, env=env), "audit verify").seconds)
        ran = must(run(lookup_cmd, env=env, stdin=NEEDLE_SECRET), "audit lookup")
        lookup_s.append(ran.seconds)
        found.append(len(json.loads(ran.stdout)))
    full = lines >= 1_000_000  # the goals are for 1M records; smaller logs (--quick) get no verdict
    verify = median(verify_s)
    rate = lines / verify
    meta = {
        "log": str(log),
        "records": lines,
        "mib": round(size_mib, 1),
        "build_seconds": build,
        "reused": reused,
        "checkpoint_every": every,
    }
    report.add(
        Row(
            "audit",
            f"audit verify: {lines:,} records, throughput",
            round(rate),
            "records/s",
            ">= 100,000 records/s",
            rate >= 100_000 if full else None,
            f"({verify:.2f} s total; goal 1M in < 10 s)",
            {**meta, "verify": summary(verify_s)},
        )
    )
    report.add(
        Row("audit", "audit verify: total", round(verify, 2), "s", "< 10 s at 1M", verify < 10 if full else None, "")
    )
    lookup = median(lookup_s)
    report.add(
        Row(
            "audit",
            f"audit lookup --secret-stdin: {lines:,} records",
            round(lookup, 2),
            "s",
            "< 2 s at 1M",
            (lookup < 2 and all(f == 1 for f in found)) if full else None,
            f"(matches found: {sorted(set(found))})",
            {**meta, "lookup": summary(lookup_s)},
        )
    )


# -- main ----------------------------------------------------------------------------------


def print_table(report: Report) -> str:
    header = ("figure", "value", "goal", "result")
    rows = [
        (r.name, r.shown_value(), r.goal or "-", "-" if r.ok is None else ("pass" if r.ok else "MISS"))
        for r in report.rows
    ]
    rows += [(f"{name}: ERROR", message[:60], "-", "ERROR") for name, message in report.errors.items()]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(4)]
    lines = ["  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    text = "\n".join(lines)
    print("\n" + text)
    return text


def product_state() -> tuple[str, str]:
    """(short sha of HEAD, a digest of uncommitted product changes or "")."""
    sha = git("rev-parse", "--short", "HEAD") or "nogit"
    diff = git("diff", "HEAD", "--", "broker", "providers", "pyproject.toml")
    return sha, hashlib.sha256(diff.encode()).hexdigest()[:16] if diff else ""


def write_results(
    report: Report, settings: Settings, selected: list[str], started: float, at_start: tuple[str, str]
) -> Path:
    sha, diff = at_start
    at_end = product_state()
    if at_end != at_start:
        report.notes.append(f"the product code changed during the run: {at_start} -> {at_end}")
        print(f"bench: note: the product code changed during the run ({at_start} -> {at_end})")
    document = {
        "meta": {
            "git_sha": sha,
            "product_dirty": bool(diff),
            "product_diff_sha256": diff,
            "at_end": {"git_sha": at_end[0], "product_diff_sha256": at_end[1]},
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "seconds": round(time.perf_counter() - started, 1),
            "loadavg_at_start": report.load_at_start,
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
            "machine": f"{platform.machine()} {os.cpu_count()} cpus",
            "quick": settings.quick,
            "figures": selected,
            "settings": settings.__dict__,
        },
        "figures": [
            {
                "figure": r.figure,
                "name": r.name,
                "value": r.value,
                "unit": r.unit,
                "goal": r.goal,
                "pass": r.ok,
                "detail": r.detail,
                "data": r.data,
            }
            for r in report.rows
        ],
        "errors": report.errors,
        "background_cpu_busy": report.background,
        "notes": report.notes,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"bench-{sha}{'-quick' if settings.quick else ''}.json"
    text = json.dumps(document, indent=1, default=str) + "\n"
    path.write_text(text)
    (RESULTS / "latest.json").write_text(text)
    return path


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, smaller counts (a smoke run)")
    parser.add_argument("--only", default="", help=f"comma-separated figures: {','.join(FIGURES)}")
    parser.add_argument("--reps", type=int, help="issue/revoke repetitions (default 9, quick 3)")
    parser.add_argument("--cold-reps", type=int, help="cold start repetitions (default 21, quick 5)")
    parser.add_argument("--concurrency", type=int, help="concurrent cycles (default 32, quick 8)")
    parser.add_argument("--concurrent-runs", type=int, help="runs of the concurrent figure (default 5, quick 1)")
    parser.add_argument("--sweep-sessions", type=int, help="expired sessions to sweep (default 1000, quick 100)")
    parser.add_argument("--sweep-reps", type=int, help="sweep repetitions (default 5, quick 1)")
    parser.add_argument("--seed-processes", type=int, help="parallel seeding processes for sweep (default 4)")
    parser.add_argument("--memory-reps", type=int, help="peak-RSS repetitions (default 7, quick 3)")
    parser.add_argument("--audit-records", type=int, help="issuance log size (default 1,000,000, quick 100,000)")
    parser.add_argument("--audit-checkpoint-every", type=int, default=1000, help="records between checkpoints")
    parser.add_argument(
        "--serve",
        action="store_true",
        help="start the stack, write a broker config and the floor's parameters, print them, wait for Ctrl-C"
        " (for profiling by hand)",
    )
    parser.add_argument("--audit-reps", type=int, help="verify/lookup repetitions (default 5, quick 3)")
    args = parser.parse_args(argv)
    selected = [name.strip() for name in args.only.split(",") if name.strip()] or list(FIGURES)
    unknown = [name for name in selected if name not in FIGURES]
    if unknown:
        parser.error(f"--only: unknown figure(s) {', '.join(unknown)} (known: {', '.join(FIGURES)})")
    args.selected = [name for name in FIGURES if name in selected]
    return args


@contextlib.contextmanager
def workspace() -> Iterator[None]:
    RESULTS.mkdir(exist_ok=True)
    unmount_under(WORK)
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(mode=0o700)
    try:
        yield
    finally:
        unmount_under(WORK)
        shutil.rmtree(WORK, ignore_errors=True)


def serve() -> int:
    """Keep the stack up with one broker installation, for profiling ``broker issue`` and friends by hand."""
    with workspace():
        stack = Stack()
        stack.start()
        try:
            setup = BrokerSetup("serve", stack).create()
            params = floor_params(stack, Path("/dev/shm"), setup)
            env = base_env()
            (WORK / "env.sh").write_text("".join(f"export {k}={json.dumps(v)}\n" for k, v in env.items()))
            print(f"stack up. config {setup.config}, task {setup.task}, floor params {params}")
            print(f"environment: source {WORK / 'env.sh'}")
            print(f"  {BROKER} --config {setup.config} issue --task {setup.task} --json")
            print(f"  {PYTHON} {FLOOR} issue {params}")
            print("Ctrl-C (or SIGTERM) stops the stack and removes bench-results/work/", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
        finally:
            stack.stop()
    return 0


def need(stack: Stack | None) -> Stack:
    assert stack is not None
    return stack


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # clean up the stack and the mounts on SIGTERM too


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    settings = Settings.from_args(args)
    selected: list[str] = args.selected
    if os.geteuid() != 0 and NEEDS_STACK & set(selected):
        print("bench: note: not root; the broker cannot mount a tmpfs per session (run as root for real figures)")
    started = time.perf_counter()
    at_start = product_state()
    load = os.getloadavg()[0]
    if load > 0.5 * (os.cpu_count() or 1):
        print(f"bench: note: load average {load:.1f} on {os.cpu_count()} cpus; other work will skew the figures")
    report = Report()
    signal.signal(signal.SIGTERM, _interrupt)
    if args.serve:
        return serve()
    with workspace():
        stack: Stack | None = None
        try:
            if NEEDS_STACK & set(selected):
                print("== starting the local stack (OpenBao dev, moto server, GitHub App emulator)", flush=True)
                stack = Stack()
                stack.start()
            steps: list[tuple[str, Callable[[], None]]] = []
            if "cold" in selected:
                steps.append(("cold", lambda: figure_cold(settings, report)))
            wanted_cycles = {"issue", "revoke"} & set(selected)
            if wanted_cycles:
                assert stack is not None
                steps.append(("issue/revoke", lambda: figure_cycles(settings, report, stack, wanted_cycles)))
            if "concurrent" in selected:
                steps.append(("concurrent", lambda: figure_concurrent(settings, report, need(stack))))
            if "sweep" in selected:
                steps.append(("sweep", lambda: figure_sweep(settings, report, need(stack))))
            if "memory" in selected:
                steps.append(("memory", lambda: figure_memory(settings, report, need(stack))))
            if "audit" in selected:
                steps.append(("audit", lambda: figure_audit(settings, report)))
            for name, step in steps:
                background = cpu_busy()
                report.background[name] = round(background, 2)
                print(f"== {name} (CPU busy with other work just before: {background:.0%})", flush=True)
                step_start = time.perf_counter()
                try:
                    step()
                except Exception as exc:  # one broken figure must not cost the others
                    report.errors[name] = f"{type(exc).__name__}: {exc}"
                    print(f"  !! {name} failed: {type(exc).__name__}: {exc}", flush=True)
                print(f"   ({name} took {time.perf_counter() - step_start:.1f} s)", flush=True)
        finally:
            if stack is not None:
                stack.stop()
    print_table(report)
    path = write_results(report, settings, selected, started, at_start)
    print(f"\nresults: {path.relative_to(ROOT)} (and bench-results/latest.json)")
    return 1 if report.errors else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
