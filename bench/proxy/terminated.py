"""The terminated-host figures: what the operations decision adds per request, and 1,000 requests/s with evidence.

Part of ``scripts/bench`` (``--only terminated``), or alone:
``python -m bench.proxy.terminated [--quick]``. ``bench/proxy/gitpush.py`` adds the
50 MiB git push over the modelled link to the same figure.

Each proxy runs in a child process of its own with its evidence on a real,
signed issuance log, the upstream in another (``bench/proxy/proxychild.py``);
clients keep one tunnel each, as gh and git do.

- Decision latency: two proxies that both terminate the host (a credential
  goes there) and log every request, one with the SPEC's operations and one
  without; requests alternate between them (a REST GET, and a GraphQL query
  whose body decides), and the figure is the difference of the medians. The
  direct median (no proxy) is reported beside it.
- Rate: 8 tunnels paced to 1,000 requests/s in total for a fixed time
  through the proxy with operations: the rate reached, latencies, the
  evidence backlog at its peak, records written against requests sent, and
  how long the last records took to reach the log after the load stopped.
- The evidence path alone: 1,000 records/s handed to an ``EvidenceWriter``
  on a real log (the proxy's side without the proxy): backlog, lag, CPU.
- The log's own cost per record: ``append`` (one lock, write, fsync per
  record) and ``append_many`` in batches, in process, on the work directory's
  file system.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import WORK, Report, Row, Settings
from bench.proxy.proxychild import RULE, ProxyChild, one, tunnel, upstream
from bench.proxy.tunnels import machine_busy, self_cpu


def decision_latency(work: Path, requests: int) -> dict[str, Any]:
    up = upstream(work)
    with_ops = ProxyChild(work / "with", up.child.port, up.ca_file, operations=RULE)
    without = ProxyChild(work / "without", up.child.port, up.ca_file, operations=None)
    try:
        sides = {
            "direct": tunnel(None, up.child.port, up.ca_file),
            "terminated": tunnel(without, up.child.port, without.ca_file),
            "operations": tunnel(with_ops, up.child.port, with_ops.ca_file),
        }
        samples: dict[str, dict[str, list[float]]] = {kind: {s: [] for s in sides} for kind in ("rest", "graphql")}
        for number in range(requests + 50):
            kind = "rest" if number % 2 else "graphql"
            order = list(sides) if number % 3 else list(reversed(sides))  # the order rotates: drift falls on all
            for side in order:
                elapsed = one(sides[side], kind)
                if number >= 50:  # warmed up: connections open, leaves made, code paths hot
                    samples[kind][side].append(elapsed)
        for connection in sides.values():
            connection.close()
    finally:
        for child in (with_ops, without):
            child.close()
        up.child.close()
    return {
        kind: {side: {"median_ms": statistics.median(v), "n": len(v)} for side, v in by_side.items()}
        for kind, by_side in samples.items()
    }


def paced_load(work: Path, rate: int, seconds: float, tunnels: int = 8) -> dict[str, Any]:
    up = upstream(work)
    proxy = ProxyChild(work / "rate", up.child.port, up.ca_file, operations=RULE)
    latencies: list[float] = []
    sent = [0]
    errors: list[str] = []
    lock = threading.Lock()
    start = time.perf_counter() + 0.5

    def client(index: int) -> None:
        connection = tunnel(proxy, up.child.port, proxy.ca_file)
        one(connection, "rest")  # open the tunnel before the clock starts
        interval = tunnels / rate
        next_at = start + index * interval / tunnels
        while next_at < start + seconds:
            time.sleep(max(0.0, next_at - time.perf_counter()))
            try:
                elapsed = one(connection, "rest" if len(latencies) % 2 else "graphql")
            except (OSError, AssertionError, http.client.HTTPException) as exc:
                errors.append(type(exc).__name__)
                connection = tunnel(proxy, up.child.port, proxy.ca_file)
                continue
            with lock:
                latencies.append(elapsed)
                sent[0] += 1
            next_at += interval
        connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(tunnels)]
    cpu_before = (proxy.child.cpu(), up.child.cpu(), self_cpu(), machine_busy())
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start
        cpu_after = (proxy.child.cpu(), up.child.cpu(), self_cpu(), machine_busy())
        stats = proxy.stats()
    finally:
        proxy.close()
        up.child.close()
    total = sent[0] + tunnels  # each tunnel's opening request is recorded too
    ordered = sorted(latencies)
    return {
        "target_rate": rate,
        "seconds": seconds,
        "reached_rate": sent[0] / elapsed,
        "requests": sent[0],
        "errors": errors,
        "median_ms": statistics.median(ordered) if ordered else float("nan"),
        "p99_ms": ordered[int(0.99 * (len(ordered) - 1))] if ordered else float("nan"),
        "records_written": stats["final"]["written"],
        "records_expected": total,
        "backlog_peak": stats["final"]["peak"],
        "backlog_when_load_stopped": stats["live"]["pending"],
        "records_per_batch": stats["final"]["written"] / max(1, stats["final"]["batches"]),
        "drain_s": stats["final"]["drain_s"],
        # CPU milliseconds per request of each party (not inflated by waiting for a core), and the cores the rest
        # of the machine kept busy meanwhile: what says whether the rate is the proxy's limit or the machine's.
        "proxy_cpu_ms": (cpu_after[0] - cpu_before[0]) / max(1, sent[0]) * 1000,
        "upstream_cpu_ms": (cpu_after[1] - cpu_before[1]) / max(1, sent[0]) * 1000,
        "client_cpu_ms": (cpu_after[2] - cpu_before[2]) / max(1, sent[0]) * 1000,
        "other_cores": (
            (cpu_after[3] - cpu_before[3]) - sum(a - b for a, b in zip(cpu_after[:3], cpu_before[:3], strict=True))
        )
        / elapsed,
    }


RECORD = {
    "host": "api.github.com:443",
    "credential": "repo",
    "method": "GET",
    "path": "/repos/octo/widgets/pulls",
    "decision": "allowed",
    "rule": "dev-agents",
    "operations": "github_api",
    "reason": "GET /repos/octo/widgets/pulls matches allow GET *",
    "status": 200,
    "upstream_status": 200,
    "request_bytes": 0,
    "answer_bytes": 2048,
    "head_sha256": "0" * 64,
    "body_sha256": "1" * 64,
    "body_complete": True,
    "failure": None,
}


def writer_alone(work: Path, rate: int, seconds: float) -> dict[str, float]:
    """The evidence path alone at ``rate`` records/s: an ``EvidenceWriter`` on a real log, records handed to it on
    a fixed schedule as the proxy hands them (``submit``); its backlog, how far the log lags, CPU per record."""
    import os

    from broker.audit.keys import load_or_create_keys
    from broker.audit.log import IssuanceLog
    from broker.egress.evidence.writer import EvidenceWriter

    work.mkdir(parents=True)
    log = IssuanceLog(work, load_or_create_keys(work / "audit.key", work / "fp.key"))
    writer = EvidenceWriter(log, session="s-aaaaaaaaaaaa", task="bench", requester="bench")
    total = int(rate * seconds)
    cpu = sum(os.times()[:2])
    start = time.perf_counter()
    for number in range(total):
        time.sleep(max(0.0, start + number / rate - time.perf_counter()))
        writer.submit(dict(RECORD, path=f"/repos/octo/widgets/issues/{number}"))
    offered = time.perf_counter() - start
    backlog = writer.pending
    lost = writer.close()
    lag = time.perf_counter() - start - offered
    used = sum(os.times()[:2]) - cpu
    return {
        "rate": total / offered,
        "records": writer.written,
        "lost": lost,
        "backlog_peak": writer.peak,
        "backlog_at_end": backlog,
        "lag_ms": lag * 1000,
        "per_batch": writer.written / max(1, writer.batches),
        "cpu_us": used / max(1, total) * 1e6,
    }


def log_cost(work: Path, records: int) -> dict[str, float]:
    """Microseconds per record the issuance log itself takes: one append each, and batches of 16 and 256."""
    from broker.audit.keys import load_or_create_keys
    from broker.audit.log import Entry, IssuanceLog

    found: dict[str, float] = {}
    for batch in (1, 16, 256):
        directory = work / f"log-{batch}"
        directory.mkdir(parents=True)
        log = IssuanceLog(directory, load_or_create_keys(directory / "audit.key", directory / "fp.key"))
        entries = [Entry("egress.request", "s-aaaaaaaaaaaa", "bench", "bench", RECORD)] * batch
        count = max(batch, records // batch * batch) if batch > 1 else min(records, 500)
        start = time.perf_counter()
        for _ in range(count // batch):
            log.append_many(entries)
        found[f"batch_{batch}_us"] = (time.perf_counter() - start) / count * 1e6
    return found


def add_rows(
    latency: dict[str, Any], load: dict[str, Any], alone: dict[str, float], cost: dict[str, float], report: Report
) -> None:
    for kind, title in (("rest", "a REST GET"), ("graphql", "a GraphQL query (its body decides)")):
        sides = latency[kind]
        added = sides["operations"]["median_ms"] - sides["terminated"]["median_ms"]
        report.add(
            Row(
                "terminated",
                f"terminated: the operations decision's added latency, {title}, median",
                round(added, 3),
                "ms",
                "< 1 ms",
                added < 1,
                f"({sides['operations']['median_ms']:.2f} with operations vs {sides['terminated']['median_ms']:.2f}"
                f" ms terminated without, {sides['direct']['median_ms']:.2f} ms direct; {sides['operations']['n']}"
                " keep-alive requests each, alternating, evidence logged on both)",
                {"sides": sides},
            )
        )
    ok = (
        load["reached_rate"] >= 0.97 * load["target_rate"]
        and load["records_written"] == load["records_expected"]
        and not load["errors"]
    )
    report.add(
        Row(
            "terminated",
            f"terminated: {load['target_rate']:,} requests/s paced through one session's proxy, evidence on",
            round(load["reached_rate"]),
            "req/s",
            f">= {load['target_rate']:,}, no record lost",
            ok,
            f"({load['requests']:,} requests in {load['seconds']:.0f} s, median {load['median_ms']:.2f} ms,"
            f" p99 {load['p99_ms']:.2f} ms; records {load['records_written']:,}/{load['records_expected']:,};"
            f" backlog peak {load['backlog_peak']}, {load['backlog_when_load_stopped']} when the load stopped,"
            f" written {load['drain_s'] * 1000:.0f} ms after; {load['records_per_batch']:.1f} records per fsync;"
            f" errors {len(load['errors'])}; CPU ms per request: proxy {load['proxy_cpu_ms']:.2f}, upstream"
            f" {load['upstream_cpu_ms']:.2f}, client {load['client_cpu_ms']:.2f}; other work kept"
            f" {load['other_cores']:.1f} cores busy)",
            load,
        )
    )
    keeps_up = alone["lost"] == 0 and alone["rate"] >= 950 and alone["lag_ms"] < 1000
    report.add(
        Row(
            "terminated",
            "terminated: the evidence path alone, 1,000 egress.request records/s handed to the writer",
            round(alone["lag_ms"], 1),
            "ms behind at the end",
            "< 1 s behind, none lost",
            keeps_up,
            f"({alone['records']:,.0f} records at {alone['rate']:,.0f}/s; backlog peak {alone['backlog_peak']:.0f},"
            f" {alone['backlog_at_end']:.0f} at the end; {alone['per_batch']:.1f} records per fsync; CPU"
            f" {alone['cpu_us']:.0f} us per record, writer thread included; lost {alone['lost']:.0f})",
            alone,
        )
    )
    report.add(
        Row(
            "terminated",
            "terminated: the issuance log's cost per egress.request record, batched as the writer does (256)",
            round(cost["batch_256_us"], 1),
            "us",
            "",
            None,
            f"(one fsync per record: {cost['batch_1_us']:.0f} us; batches of 16: {cost['batch_16_us']:.0f} us;"
            f" the writer batches whatever waits, so 1,000 records/s cost about"
            f" {cost['batch_16_us'] * 1000 / 1e6:.0%} of a core at 16 per batch)",
            cost,
        )
    )


def figure_terminated(settings: Settings, report: Report) -> None:
    from bench.proxy.gitpush import figure_gitpush

    work = Path(tempfile.mkdtemp(prefix="terminated-", dir=WORK if WORK.exists() else None))
    requests = settings.egress_requests
    latency = decision_latency(work / "latency", requests)
    load = paced_load(work / "load", 1000, 3.0 if settings.quick else 10.0)
    alone = writer_alone(work / "alone", 1000, 3.0 if settings.quick else 10.0)
    cost = log_cost(work / "cost", 2000 if settings.quick else 20000)
    add_rows(latency, load, alone, cost, report)
    figure_gitpush(settings, report, work / "push")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.proxy.terminated", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--no-push", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="terminated-"))
    report = Report()
    latency = decision_latency(work / "latency", 100 if args.quick else args.requests)
    load = paced_load(work / "load", args.rate, 3.0 if args.quick else args.seconds)
    alone = writer_alone(work / "alone", args.rate, 3.0 if args.quick else args.seconds)
    cost = log_cost(work / "cost", 2000 if args.quick else 20000)
    add_rows(latency, load, alone, cost, report)
    if not args.no_push:
        from bench.proxy.gitpush import measure_push

        measure_push(work / "push", quick=args.quick, report=report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
