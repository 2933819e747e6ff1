"""The dynamic figure: what Vault dynamic secrets add to ``issue``, one token against one of each kind.

Part of ``scripts/bench`` (``--only dynamic``; ``--quick`` makes it small), or alone. It
starts an OpenBao dev server and a PostgreSQL (the test fixtures'),
sets up the database, pki and ssh engines, and times ``broker issue`` in
process (the CLI entry point, as ``BrokerEnv.run`` calls it; each session is
revoked untimed). Twice: on loopback, and through a proxy that holds every
request back ``--rtt`` milliseconds (a round trip's latency on a keep-alive
connection), so that each sequential Vault call on the critical path shows
as one more RTT. The goal: the three dynamic kinds add no more than one
round trip each (3 x RTT). Alone it prints the rows and a JSON document.

    .venv/bin/python -m bench.commands.vault_dynamic [--runs 15] [--rtt 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import Report, Row, Settings
from devstack.openbao import start_openbao, stop_openbao
from devstack.postgres import start_postgres, stop_postgres
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.slowproxy import SlowProxy, slow_proxy
from tests.fixtures.vault_engines import Engines, add_dynamic_vault, setup_engines

HEAD = """
version: 1
task: fix-bench-1
ttl: 20m
sandbox: {uid: 1000, gid: 1000, mount_path: /run/secrets}
credentials:
  - {name: kv, provider: vault, policies: [ci-read], ttl: 10m, num_uses: 5}
"""
DYNAMIC = """
  - {name: db, provider: vault, kind: database, role: agent-ro, ttl: 10m}
  - {name: cert, provider: vault, kind: pki, role: agent, common_name: agent.ci.internal, ttl: 10m}
  - {name: host, provider: vault, kind: ssh, role: agent, principals: [git], ttl: 10m}
"""
SESSIONS = {
    "one token": HEAD,
    "one database user": HEAD.split("credentials:")[0] + "credentials:\n" + DYNAMIC.splitlines()[1] + "\n",
    "one of each kind": HEAD.rstrip("\n") + DYNAMIC,
}


def issue_once(env: BrokerEnv, path: Path, proxy: SlowProxy | None) -> tuple[float, int]:
    """One timed issue (ms) and the Vault requests it made; the session is revoked untimed."""
    before = proxy.requests if proxy else 0
    started = time.perf_counter()
    result = env.run("issue", "--task", str(path), "--json")
    elapsed = (time.perf_counter() - started) * 1000
    requests = proxy.requests - before if proxy else 0
    if result.code != 0:
        raise SystemExit(f"issue failed: {result.stderr.strip()}")
    env.run("revoke", "--session", result.json()["session"])
    return elapsed, requests


def summary(samples: Sequence[float]) -> dict[str, Any]:
    quartiles = statistics.quantiles(samples, n=4)
    return {"median_ms": round(statistics.median(samples), 1), "q1_ms": round(quartiles[0], 1),
            "q3_ms": round(quartiles[2], 1), "runs": len(samples)}  # fmt: skip


DYNAMIC_KINDS = 3  # database, pki, ssh: the goal allows one round trip each


def bench(engines: Engines, addr: str, runs: int, root: Path, proxy: SlowProxy | None = None) -> dict[str, Any]:
    env = make_env(Path(tempfile.mkdtemp(dir=root)))
    try:
        add_dynamic_vault(env, engines)
        env.providers["vault"]["addr"] = addr
        env.write_config()
        paths = {
            name: env.write_task(task, name=f"bench-{index}.yaml")
            for index, (name, task) in enumerate(SESSIONS.items())
        }
        for path in paths.values():  # warm: imports, connections, the log's first checkpoint
            issue_once(env, path, None)
        samples: dict[str, list[float]] = {name: [] for name in paths}
        requests: dict[str, int] = dict.fromkeys(paths, 0)
        for _ in range(runs):  # interleaved, so that a busy moment of the machine hits every kind alike
            for name, path in paths.items():
                elapsed, made = issue_once(env, path, proxy)
                samples[name].append(elapsed)
                requests[name] = max(requests[name], made)
        results = {
            name: summary(found) | ({"vault_requests": requests[name]} if proxy else {})
            for name, found in samples.items()
        }
    finally:
        env.cleanup()
    added = results["one of each kind"]["median_ms"] - results["one token"]["median_ms"]
    return {**results, "added_by_three_dynamic_ms": round(added, 1)}


def measure(runs: int, rtt: int) -> dict[str, Any]:
    postgres = start_postgres()  # StackUnavailable without server binaries: this figure's error, not the bench's
    openbao = start_openbao()
    found: dict[str, Any] = {"runs": runs, "rtt_ms": rtt}
    try:
        engines = Engines(openbao, postgres)
        setup_engines(openbao, postgres)
        with tempfile.TemporaryDirectory(prefix="bench-dyn-") as tmp:
            found["loopback"] = bench(engines, openbao.addr, runs, Path(tmp))
            port = int(openbao.addr.rsplit(":", 1)[1])
            with slow_proxy(port, rtt / 1000, every_request=True) as proxy:
                found["rtt"] = bench(engines, proxy.addr, runs, Path(tmp), proxy)
    finally:
        stop_openbao(openbao)
        stop_postgres(postgres)
    return found


def add_rows(found: dict[str, Any], report: Report) -> None:
    rtt = found["rtt_ms"]
    loopback, slow = found["loopback"], found["rtt"]
    allowed = DYNAMIC_KINDS * rtt
    report.add(
        Row(
            "dynamic",
            "dynamic: issue, db+pki+ssh added to one token, loopback",
            loopback["added_by_three_dynamic_ms"],
            "ms",
            "",
            None,
            f"({loopback['one of each kind']['median_ms']} vs {loopback['one token']['median_ms']} ms)",
            loopback,
        )
    )
    added = slow["added_by_three_dynamic_ms"]
    extra = slow["one of each kind"]["vault_requests"] - slow["one token"]["vault_requests"]
    report.add(
        Row(
            "dynamic",
            f"dynamic: issue, db+pki+ssh added to one token, {rtt} ms per Vault request",
            added,
            "ms",
            f"<= {DYNAMIC_KINDS} round trips ({allowed} ms)",
            added <= allowed,
            f"({slow['one of each kind']['median_ms']} vs {slow['one token']['median_ms']} ms;"
            f" {extra:+d} Vault requests)",
            slow,
        )
    )


def figure_dynamic(settings: Settings, report: Report) -> None:
    add_rows(measure(settings.dynamic_runs, settings.dynamic_rtt), report)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--rtt", type=int, default=40, help="milliseconds added to every request")
    args = parser.parse_args(argv)
    found = measure(args.runs, args.rtt)
    add_rows(found, Report())
    print(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()
