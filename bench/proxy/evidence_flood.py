"""The evidence figure: what one sandbox's flood of refused requests adds to the issuance log, per second.

Part of ``scripts/bench`` (``--only evidence``), or alone:
``python -m bench.proxy.evidence_flood [--quick] [--seconds S]``.

A proxy in a child process of its own (``bench/proxy/proxychild.py``)
terminates one loopback host whose operations allow GET only, with its
evidence on a real, signed issuance log; the client keeps two CONNECT
tunnels and pipelines refused POSTs on them (a 1,000-character path, as the
review's reproduction did), 32 at a time, for a fixed time. The proxy answers
each itself and keeps the connection: nothing goes upstream, so the client
is bounded by the proxy alone.

Two sessions, one after the other: one whose ``[egress] evidence_budget``
the flood never reaches (each refusal is one record: what every session was
before the budget), and one past its budget from the first moments (100
records; then the refusals are summed, one record per decision, host,
method and rule a minute). For each: requests answered per second, records
written per second, the log's growth per second and per hour, and whether
the records count every request sent (a summed record by its ``count``).
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import WORK, Report, Row, Settings
from bench.proxy.proxychild import ProxyChild, upstream

PATH = "/" + "a" * 1000
PIPELINE = 32
READ_ONLY = {"http": {"127.0.0.1:{port}": {"methods": ["GET"]}}}
NEVER_REACHED = {"records": 100_000_000, "bytes": 1 << 40}  # one record per request, as before the budget
SPENT = {"records": 100, "bytes": 64 << 20}  # spent at once: the refusals are summed from then on


class Pipelined:
    """A CONNECT tunnel through the proxy with TLS, on which requests go 32 at a time and answers are counted."""

    def __init__(self, proxy: ProxyChild, port: int) -> None:
        raw = socket.create_connection(("127.0.0.1", proxy.port), timeout=30)
        raw.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += raw.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        context = ssl.create_default_context(cafile=str(proxy.ca_file))
        self.tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
        head = f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\r\n"
        self.batch = head.encode() * PIPELINE
        self.buffer = b""
        self.statuses: dict[int, int] = {}

    def round(self) -> int:
        """Send a batch, read its answers (each framed by Content-Length); how many came back."""
        self.tls.sendall(self.batch)
        for _ in range(PIPELINE):
            while b"\r\n\r\n" not in self.buffer:
                data = self.tls.recv(65536)
                if not data:
                    raise ConnectionError("the proxy closed the tunnel")
                self.buffer += data
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
            )
            while len(rest) < length:
                rest += self.tls.recv(65536)
            self.buffer = rest[length:]
            status = int(head.split(b" ", 2)[1])
            self.statuses[status] = self.statuses.get(status, 0) + 1
        return PIPELINE

    def close(self) -> None:
        self.tls.close()


def flood(work: Path, budget: dict[str, int], seconds: float, tunnels: int = 2) -> dict[str, Any]:
    """One session's proxy flooded with refused requests for ``seconds``: what it answered and what it logged."""
    up = upstream(work)
    proxy = ProxyChild(work / "proxy", up.child.port, up.ca_file, operations=READ_ONLY, credential=False, budget=budget)
    sent = [0] * tunnels
    statuses: dict[int, int] = {}
    try:
        clients = [Pipelined(proxy, up.child.port) for _ in range(tunnels)]
        stop = time.perf_counter() + seconds

        def run(index: int) -> None:
            while time.perf_counter() < stop:
                sent[index] += clients[index].round()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(tunnels)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        for client in clients:
            for status, count in client.statuses.items():
                statuses[status] = statuses.get(status, 0) + count
            client.close()
        time.sleep(0.5)  # the proxy sees the tunnels close before it is stopped
        stats = proxy.stats()  # the proxy stops and writes what is left, the open sums too
    finally:
        proxy.close()
        up.child.close()
    lines = [line for line in (proxy.work / "issuance.jsonl").read_text().splitlines() if '"egress.request"' in line]
    records = [json.loads(line) for line in lines]
    size = sum(len(line) + 1 for line in lines)
    past = sum(len(line) + 1 for line in lines[budget["records"] :])  # what the log grew by past the budget
    requests = sum(sent)
    return {
        "seconds": elapsed,
        "requests": requests,
        "requests_per_s": requests / elapsed,
        "statuses": statuses,
        "records": len(records),
        "summed_records": sum(1 for r in records if "count" in r),
        "records_per_s": len(records) / elapsed,
        "records_past_budget_per_s": max(0, len(records) - budget["records"]) / elapsed,
        "counted": sum(int(r.get("count", 1)) for r in records),
        "log_bytes": size,
        "log_mb_per_s": size / elapsed / 1e6,
        "log_gb_per_hour": size / elapsed * 3600 / 1e9,
        "past_budget_mb_per_hour": past / elapsed * 3600 / 1e6,
        "written": stats["final"]["written"],
    }


def measure(work: Path, seconds: float) -> dict[str, dict[str, Any]]:
    return {"before": flood(work / "before", NEVER_REACHED, seconds), "after": flood(work / "after", SPENT, seconds)}


def add_rows(found: dict[str, dict[str, Any]], report: Report) -> None:
    before, after = found["before"], found["after"]
    for side in (before, after):
        side["complete"] = side["counted"] == side["requests"] and set(side["statuses"]) == {403}
    report.add(
        Row(
            "evidence",
            "evidence: refused requests flooding one session's proxy, one record each (budget not reached)",
            round(before["records_per_s"]),
            "records/s",
            "",
            None,
            f"({before['requests']:,} requests in {before['seconds']:.0f} s over 2 pipelined tunnels,"
            f" {before['requests_per_s']:,.0f}/s, all 403, none upstream; the log grew {before['log_mb_per_s']:.2f}"
            f" MB/s = {before['log_gb_per_hour']:.1f} GB per hour of one sandbox's loop; every request counted:"
            f" {before['complete']})",
            before,
        )
    )
    # Past the budget a session adds at most 65 records a minute (64 keys and the rest under *), to its hard cap.
    bounded = after["complete"] and after["records_past_budget_per_s"] <= 65 / 60
    report.add(
        Row(
            "evidence",
            "evidence: the same flood past the session's evidence budget, refusals summed per key and minute",
            round(after["records_past_budget_per_s"], 3),
            "records/s",
            "<= 65 a minute, every request counted",
            bounded,
            f"({after['requests']:,} requests in {after['seconds']:.0f} s, {after['requests_per_s']:,.0f}/s, all 403;"
            f" {after['records']} records: the budget's 100, then {after['summed_records']} summed counting"
            f" {after['counted'] - (after['records'] - after['summed_records']):,}; the log grew"
            f" {after['log_bytes'] / 1e3:,.0f} kB in all, past the budget at {after['past_budget_mb_per_hour']:.2f}"
            f" MB per hour (at most 65 records a minute, about 7 MB an hour, until the hard cap); every request"
            f" counted: {after['complete']})",
            after,
        )
    )


def figure_evidence(settings: Settings, report: Report) -> None:
    work = Path(tempfile.mkdtemp(prefix="evidence-", dir=WORK if WORK.exists() else None))
    add_rows(measure(work, 3.0 if settings.quick else 10.0), report)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.proxy.evidence_flood", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    report = Report()
    add_rows(measure(Path(tempfile.mkdtemp(prefix="evidence-")), 3.0 if args.quick else args.seconds), report)
    for row in report.rows:
        print(row.name, row.shown_value(), row.detail)
    return 0


if __name__ == "__main__":
    sys.exit(main())
