"""The AWS leg of ``issue`` and ``revoke`` against the floor's, on loopback and at a modelled round-trip time.

Standalone: starts a moto server in this process with two roles (one for the
broker, one for the floor, so neither's deny policy grows the other's), and
puts a keep-alive latency proxy in front of it (``tests/fixtures/latencyproxy``:
every request waits ``--rtt`` ms, a connection's first request
``--handshakes`` x RTT more for TCP + TLS). Then, both sides alternating,
each a cold process as a launcher would start it:

  issue   ``broker issue --json`` of a task with one AWS credential
          vs ``bench/floor.py aws-issue`` (GetRole, AssumeRole, GetCallerIdentity)
  revoke  ``broker revoke --json`` of that session
          vs ``bench/floor.py aws-revoke`` (GetRole, GetRolePolicy, PutRolePolicy)

Each figure twice: as cold processes (what a launcher pays today, CPU of
imports and setup included), and in this process (``broker.cli.main`` with
a fresh ``Broker`` per call, the floor's functions with fresh boto3 sessions:
the same calls and connections without the cold start, i.e. the round trips).
The deny policies are removed (untimed) after every cycle. Prints a table
and one JSON document: medians and quartiles in ms, the ratio to the floor,
and the calls and connections each side made (what each broker call buys:
``BUYS``).

    .venv/bin/python -m bench.commands.aws_round_trips [--runs 15] [--rtt 40] [--handshakes 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench import floor as floor_script
from bench.common import MOTO_IDENTITY
from broker.cli.app import main as cli_main
from devstack.aws import ACCOUNT, REGION, create_role, iam_client, start_moto
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.latencyproxy import LatencyProxy, latency_proxy

ROOT = Path(__file__).resolve().parents[2]
BROKER_ROLE, FLOOR_ROLE = "bench-broker", "bench-floor"
SESSION_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::artifacts/*"]}],
}
POLICY = f"""
rules:
  - id: bench
    description: the bench's agents
    tasks: ["bench-*"]
    sandbox_uids: ["0-65534"]
    sandbox_gids: ["0-65534"]
    max_ttl: 1h
    grants:
      - provider: aws
        roles: ["arn:aws:iam::{ACCOUNT}:role/{BROKER_ROLE}"]
        actions: ["s3:GetObject"]
        resources: ["arn:aws:s3:::artifacts/*"]
        max_ttl: 15m
"""
TASK = f"""
version: 1
task: bench-aws-1
ttl: 20m
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
credentials:
  - name: artifacts
    provider: aws
    role_arn: arn:aws:iam::{ACCOUNT}:role/{BROKER_ROLE}
    ttl: 15m
    session_policy: {json.dumps(SESSION_POLICY)}
"""
#: What each call of the broker's buys (the floor makes its calls because a script would).
BUYS = {
    "issue": {
        "GetRole": "RoleId (the deny entry's role, this incarnation's live sessions), MaxSessionDuration, the ARN",
        "ListRolePolicies": "the room the role's other inline policies leave the deny policy",
        "GetRolePolicy": "the deny policy as it stands: the room a revocation of this session needs",
        "AssumeRole": "the credential; its answer names the session (AssumedRoleId, Arn), checked",
    },
    "revoke": {
        "GetRole": "the role was not recreated (a deny on a new role cannot name the old session)",
        "ListRolePolicies": "the write stays within IAM's 10,240 characters",
        "GetRolePolicy": "the entries to keep (the read of the read-modify-write)",
        "PutRolePolicy": "the deny itself",
    },
}


def quartiles(samples: Sequence[float]) -> dict[str, float]:
    q = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
    return {"median": round(q[1], 1), "q1": round(q[0], 1), "q3": round(q[2], 1)}


class Side:
    """One side of the comparison: its timings, and the calls and connections of its last run."""

    def __init__(self, name: str, proxy: LatencyProxy) -> None:
        self.name, self.proxy = name, proxy
        self.ms: dict[str, list[float]] = {"issue": [], "revoke": []}
        self.calls: dict[str, list[str]] = {}
        self.connections: dict[str, int] = {}

    def timed(self, what: str, run: Callable[[], str]) -> str:
        calls, connections = len(self.proxy.actions), self.proxy.connections
        started = time.perf_counter()
        out = run()
        self.ms[what].append((time.perf_counter() - started) * 1000)
        self.calls[what] = self.proxy.calls(calls)
        self.connections[what] = self.proxy.connections - connections
        return out


def process(cmd: list[str]) -> Callable[[], str]:
    def run() -> str:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
        if done.returncode != 0:
            raise SystemExit(f"{cmd[2:4]} failed: {done.stderr.strip()}")
        return done.stdout

    return run


def in_process(cmd: list[str]) -> Callable[[], str]:
    """``cmd`` run by its entry point in this process: the broker's CLI main, or the floor's main."""

    def run() -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = (cli_main if cmd[1] == "-m" else floor_script.main)(cmd[3:] if cmd[1] == "-m" else cmd[2:])
        if code != 0:
            raise SystemExit(f"{cmd[2:4]} failed in process")
        return out.getvalue()

    return run


def broker_cmd(env: BrokerEnv, *args: str) -> list[str]:
    return [sys.executable, "-m", "broker.cli", "--config", str(env.config_path), *args]


def measure(
    moto_url: str,
    runs: int,
    rtt_ms: float,
    handshakes: float,
    work: Path,
    runner: Callable[[list[str]], Callable[[], str]],
) -> dict[str, Any]:
    port = urlsplit(moto_url).port
    assert port is not None
    rtt = rtt_ms / 1000
    with latency_proxy(port, rtt, handshakes * rtt) as proxy:
        env = make_env(work)
        env.add_provider("aws", {"type": "aws_sts", "region": REGION, "endpoint_url": proxy.addr})
        env.write_policy(POLICY)
        task = env.write_task(TASK)
        floor_dir = work / "floor"
        floor_dir.mkdir()
        params = work / "floor.json"
        params.write_text(
            json.dumps(
                {
                    "task": "bench-aws-1",
                    "uid": 1000,
                    "gid": 1000,
                    "floor_dir": str(floor_dir),
                    "aws_endpoint": proxy.addr,
                    "aws_region": REGION,
                    "aws_role_arn": f"arn:aws:iam::{ACCOUNT}:role/{FLOOR_ROLE}",
                    "aws_ttl": 900,
                    "aws_session_policy": SESSION_POLICY,
                }
            )
        )
        floor_cmd = [sys.executable, str(ROOT / "bench" / "floor.py")]
        broker, floor = Side("broker", proxy), Side("floor", proxy)
        iam = iam_client(moto_url)
        try:
            for run in range(runs + 1):  # the first cycle warms the page cache, untimed
                order = [broker, floor] if run % 2 == 0 else [floor, broker]
                done: dict[str, str] = {}
                for side in order:
                    if side is broker:
                        out = side.timed("issue", runner(broker_cmd(env, "issue", "--task", str(task), "--json")))
                        done["broker"] = json.loads(out)["session"]
                    else:
                        done["floor"] = side.timed("issue", runner([*floor_cmd, "aws-issue", str(params)])).strip()
                for side in order:
                    if side is broker:
                        side.timed("revoke", runner(broker_cmd(env, "revoke", "--session", done["broker"], "--json")))
                    else:
                        side.timed("revoke", runner([*floor_cmd, "aws-revoke", str(params), done["floor"]]))
                for role in (BROKER_ROLE, FLOOR_ROLE):  # untimed: neither deny policy grows over the runs
                    for name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
                        iam.delete_role_policy(RoleName=role, PolicyName=name)
                if run == 0:
                    for side in (broker, floor):
                        side.ms = {"issue": [], "revoke": []}
        finally:
            env.cleanup()
    report: dict[str, Any] = {}
    for what in ("issue", "revoke"):
        b, f = quartiles(broker.ms[what]), quartiles(floor.ms[what])
        report[what] = {
            "broker_ms": b,
            "floor_ms": f,
            "ratio": round(b["median"] / f["median"], 2),
            "broker_calls": broker.calls[what],
            "broker_connections": broker.connections[what],
            "floor_calls": floor.calls[what],
            "floor_connections": floor.connections[what],
        }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.commands.aws_round_trips", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=15, help="timed cycles per latency (default 15)")
    parser.add_argument("--rtt", type=float, default=40, help="milliseconds added to every request (default 40)")
    parser.add_argument("--handshakes", type=float, default=2, help="RTTs a new connection adds (default 2)")
    args = parser.parse_args(argv)
    os.environ.update(
        AWS_ACCESS_KEY_ID=MOTO_IDENTITY["aws_access_key_id"],
        AWS_SECRET_ACCESS_KEY=MOTO_IDENTITY["aws_secret_access_key"],
        AWS_DEFAULT_REGION=REGION,
        AWS_EC2_METADATA_DISABLED="true",
    )
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_CONFIG_FILE"):
        os.environ.pop(name, None)
    server = start_moto()
    try:
        create_role(server.url, BROKER_ROLE)
        create_role(server.url, FLOOR_ROLE)
        report: dict[str, Any] = {"runs": args.runs, "handshake_rtts": args.handshakes, "buys": BUYS}
        with tempfile.TemporaryDirectory(prefix="aws-round-trips-") as tmp:
            for mode, runner in (("process", process), ("in-process", in_process)):
                for rtt_label, rtt in (("loopback", 0.0), (f"rtt_{args.rtt:g}ms", args.rtt)):
                    label = f"{mode} {rtt_label}"
                    work = Path(tmp) / label.replace(" ", "-")
                    work.mkdir()
                    report[label] = measure(server.url, args.runs, rtt, args.handshakes, work, runner)
                    for what in ("issue", "revoke"):
                        row = report[label][what]
                        print(
                            f"{label:>21} {what:<6} broker {row['broker_ms']['median']:7.1f} ms"
                            f" ({len(row['broker_calls'])} calls, {row['broker_connections']} conn)"
                            f"  floor {row['floor_ms']['median']:7.1f} ms"
                            f" ({len(row['floor_calls'])} calls, {row['floor_connections']} conn)"
                            f"  ratio {row['ratio']:.2f}",
                            file=sys.stderr,
                        )
    finally:
        server.stop()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
