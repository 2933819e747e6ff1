"""The terminated-host figures: what the operations decision adds per request, and 1,000 requests/s with evidence.

Part of ``scripts/bench`` (``--only terminated``), or alone:
``python -m bench.terminated [--quick]``. ``bench/gitpush.py`` adds the
50 MiB git push over the modelled link to the same figure.

Each proxy runs in a child process of its own (``running_proxy`` with an
``Interceptor`` and an ``EvidenceWriter`` on a real, signed issuance log in
the bench's work directory); the upstream is a TLS HTTP/1.1 server with
keep-alive in another child; the session CA and the upstream's CA are made
with ``SessionCA``. Clients keep one tunnel each (``HTTPSConnection`` with
``set_tunnel``), as gh and git do.

- Decision latency: two proxies that both terminate the host (a credential
  goes there) and log every request, one with the SPEC's operations and one
  without; requests alternate between them (a REST GET, and a GraphQL query
  whose body decides), and the figure is the difference of the medians. The
  direct median (no proxy) is reported beside it.
- Rate: 8 tunnels paced to 1,000 requests/s in total for a fixed time
  through the proxy with operations: the rate reached, latencies, the
  evidence backlog at its peak, records written against requests sent, and
  how long the last records took to reach the log after the load stopped.
- The log's own cost per record: ``append`` (one lock, write, fsync per
  record) and ``append_many`` in batches, in process, on the work directory's
  file system.
"""

from __future__ import annotations

import argparse
import http.client
import json
import ssl
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import WORK, Report, Row, Settings
from bench.tunnels import Child, machine_busy, self_cpu

#: The SPEC's operations, on the bench's loopback host (the port filled in).
RULE = {
    "github_api": {
        "hosts": ["127.0.0.1:{port}"],
        "allow": ["GET *", "POST /repos/*/*/pulls", "POST /repos/*/*/issues/*/comments"],
        "deny": ["PUT /repos/*/*/pulls/*/merge"],
        "graphql_mutations": ["addComment"],
    },
}
GH_PR_LIST = json.dumps(
    {
        "query": "query PullRequestList($owner: String!, $repo: String!) { repository(owner: $owner, name: $repo)"
        " { pullRequests(first: 30, states: OPEN) { nodes { number title headRefName author { login } } } } }",
        "variables": {"owner": "octo", "repo": "widgets"},
    }
).encode()

UPSTREAM = """
import json, sys, ssl, socket
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from broker.egress.ca import SessionCA
ca = SessionCA(["127.0.0.1"], datetime.now(UTC) + timedelta(hours=2), label="bench upstream")
Path(sys.argv[1]).write_bytes(ca.pem)
context = ca.server_context("127.0.0.1")
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # head and body are two writes: no delayed-ACK stall between them
    def _serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = b'{"data": {"repository": {"pullRequests": {"nodes": []}}}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = _serve
    def log_message(self, *args):
        return
class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    def get_request(self):
        sock, address = self.socket.accept()
        return context.wrap_socket(sock, server_side=True), address
server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
import threading
threading.Thread(target=server.serve_forever, daemon=True).start()
sys.stdin.read()
"""

PROXY = """
import json, sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from broker.audit.keys import load_or_create_keys
from broker.audit.log import IssuanceLog
from broker.egress.ca import SessionCA
from broker.egress.destinations import parse_destination
from broker.egress.inject import Injection
from broker.egress.operations import OperationsChecker, read_operations
from broker.egress.running import running_proxy
from broker.egress.terminate.plan import Interceptor
from broker.egress.terminate.writer import EvidenceWriter
from broker.vocab.errors import PolicyFileError
from broker.vocab.fields import Fields
from broker.vocab.secret import Secret
spec = json.loads(sys.argv[1])
work = Path(spec["work"])
work.mkdir(parents=True, exist_ok=True)
host, port = spec["host"], spec["port"]
plan = Interceptor(lambda hosts: SessionCA(hosts, datetime.now(UTC) + timedelta(hours=1)),
                   upstream_ca_file=Path(spec["upstream_ca"]))
if spec.get("operations"):
    document = json.loads(json.dumps(spec["operations"]).replace("{port}", str(port)))
    plan.limit(OperationsChecker(read_operations(Fields(document, "operations", PolicyFileError)), "bench"))
if spec.get("credential"):
    plan.add(Injection(frozenset({(host, port)}), Secret("ghs_" + "p" * 36), Secret("ghs_" + "s" * 36),
                       Path(spec["upstream_ca"]), name="repo"))
(work / "session-ca.pem").write_bytes(plan.ca.pem)
keys = load_or_create_keys(work / "audit.key", work / "fingerprint.key")
log = IssuanceLog(work, keys)
writer = EvidenceWriter(log, session="s-aaaaaaaaaaaa", task="bench", requester="bench")
allow = tuple(parse_destination(a) for a in spec["allow"])
with running_proxy(allow, unix=False, tcp=True, interceptor=plan, evidence=writer) as proxy:
    print(proxy.port, flush=True)
    sys.stdin.readline()
    stats = {"written": writer.written, "batches": writer.batches, "peak": writer.peak, "pending": writer.pending}
    print(json.dumps(stats), flush=True)
    sys.stdin.readline()
    started = __import__("time").perf_counter()
drained = __import__("time").perf_counter() - started
print(json.dumps({"written": writer.written, "batches": writer.batches, "peak": writer.peak,
                  "drain_s": drained}), flush=True)
sys.stdin.read()
"""


@dataclass
class Upstream:
    child: Child
    ca_file: Path


def upstream(work: Path) -> Upstream:
    """A TLS keep-alive upstream on 127.0.0.1 in a child process, its certificate from a CA it makes."""
    work.mkdir(parents=True, exist_ok=True)
    ca_file = work / "upstream-ca.pem"
    return Upstream(Child(UPSTREAM, str(ca_file)), ca_file)


class ProxyChild:
    """A proxy in a child process for ``127.0.0.1:port``: its ``port``, its session CA, the writer's figures."""

    def __init__(
        self, work: Path, port: int, upstream_ca: Path, *, operations: dict[str, Any] | None, credential: bool = True
    ) -> None:
        self.work = work
        spec = {
            "work": str(work),
            "host": "127.0.0.1",
            "port": port,
            "upstream_ca": str(upstream_ca),
            "operations": operations,
            "credential": credential,
            "allow": [f"127.0.0.1:{port}"],
        }
        self.child = Child(PROXY, json.dumps(spec))
        self.port = self.child.port
        self.ca_file = work / "session-ca.pem"

    def stats(self) -> dict[str, Any]:
        """The writer's figures now, then after the proxy stopped (which writes the last records)."""
        process = self.child.process
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write("\n")
        process.stdin.flush()
        live = json.loads(process.stdout.readline())
        process.stdin.write("\n")
        process.stdin.flush()
        final = json.loads(process.stdout.readline())
        return {"live": live, "final": final}

    def close(self) -> None:
        self.child.close()


def tunnel(proxy: ProxyChild | None, upstream_port: int, ca_file: Path) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(ca_file))
    if proxy is None:
        return http.client.HTTPSConnection("127.0.0.1", upstream_port, context=context, timeout=30)
    connection = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=context, timeout=30)
    connection.set_tunnel("127.0.0.1", upstream_port)
    return connection


def one(connection: http.client.HTTPSConnection, kind: str) -> float:
    headers = {"Authorization": "token ghs_" + "p" * 36, "Accept": "application/json"}
    start = time.perf_counter()
    if kind == "graphql":
        connection.request("POST", "/graphql", body=GH_PR_LIST, headers={**headers, "Content-Type": "application/json"})
    else:
        connection.request("GET", "/repos/octo/widgets/pulls?state=open&per_page=30", headers=headers)
    response = connection.getresponse()
    response.read()
    elapsed = time.perf_counter() - start
    assert response.status == 200, response.status
    return elapsed * 1000


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


def log_cost(work: Path, records: int) -> dict[str, float]:
    """Microseconds per record the issuance log itself takes: one append each, and batches of 16 and 256."""
    from broker.audit.keys import load_or_create_keys
    from broker.audit.log import Entry, IssuanceLog

    fields = {
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
    found: dict[str, float] = {}
    for batch in (1, 16, 256):
        directory = work / f"log-{batch}"
        directory.mkdir(parents=True)
        log = IssuanceLog(directory, load_or_create_keys(directory / "audit.key", directory / "fp.key"))
        entries = [Entry("egress.request", "s-aaaaaaaaaaaa", "bench", "bench", fields)] * batch
        count = max(batch, records // batch * batch) if batch > 1 else min(records, 500)
        start = time.perf_counter()
        for _ in range(count // batch):
            log.append_many(entries)
        found[f"batch_{batch}_us"] = (time.perf_counter() - start) / count * 1e6
    return found


def add_rows(latency: dict[str, Any], load: dict[str, Any], cost: dict[str, float], report: Report) -> None:
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
    from bench.gitpush import figure_gitpush

    work = Path(tempfile.mkdtemp(prefix="terminated-", dir=WORK if WORK.exists() else None))
    requests = settings.egress_requests
    latency = decision_latency(work / "latency", requests)
    load = paced_load(work / "load", 1000, 3.0 if settings.quick else 10.0)
    cost = log_cost(work / "cost", 2000 if settings.quick else 20000)
    add_rows(latency, load, cost, report)
    figure_gitpush(settings, report, work / "push")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.terminated", description=__doc__.split("\n\n")[0])
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
    cost = log_cost(work / "cost", 2000 if args.quick else 20000)
    add_rows(latency, load, cost, report)
    if not args.no_push:
        from bench.gitpush import measure_push

        measure_push(work / "push", quick=args.quick, report=report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
