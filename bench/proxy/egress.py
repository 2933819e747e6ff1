"""The egress figure, on loopback: added latency per request, tunnel throughput, the proxy's memory.

Part of ``scripts/bench`` (``--only egress``; ``--quick`` makes it small), or alone:

    .venv/bin/python -m bench.proxy.egress [--requests 1000] [--tunnels 64] [--mib 10] [--rounds 5]
        [--rtt 40] [--link-mbit 1000] [--links loopback,wan] [--floor] [--compare OLD_SPLICE.py ...]

The proxy runs in a child process of its own (so its peak RSS and its CPU
time are its own), allowing one local HTTP server and the sinks. Latency:
``--requests`` GETs directly and through the proxy, alternating
(plain-HTTP forwarding, a new connection each, as curl makes them); the
figure is the difference of the medians and of the p99s. Throughput
(``bench/proxy/tunnels.py``): ``--tunnels`` concurrent CONNECT tunnels each
sending ``--mib`` MiB to a sink, against as many direct connections, in
``--rounds`` alternating rounds, on loopback and over a modelled link
(``--rtt`` ms, ``--link-mbit`` shared). ``--floor`` (on in ``scripts/bench``)
adds ``bench/proxy/relay.c``, the same splice design in C with nothing else, as
one more side: what a second TCP hop costs on this machine whatever the
relay. ``--compare`` adds a proxy whose tunnels use another copy of
``broker/egress/proxy/splice.py`` (a before/after in the same rounds). Every loop
is bounded; only loopback is used.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.common import Report, Row, Settings
from bench.proxy.tunnels import SINK, Child, Link, describe, floor_relay, rounds
from broker.egress.proxy.splice import BULK_PIPE

CHILD = """
import importlib.util, os, sys
if os.environ.get("BENCH_SPLICE"):  # another copy of the tunnel copier, for a before/after
    spec = importlib.util.spec_from_file_location("broker.egress.proxy.splice", os.environ["BENCH_SPLICE"])
    module = importlib.util.module_from_spec(spec)
    sys.modules["broker.egress.proxy.splice"] = module
    spec.loader.exec_module(module)
from broker.egress.destinations import parse_destination
from broker.egress.proxy.thread import proxy_thread
allow = tuple(parse_destination(a) for a in sys.argv[1:])
with proxy_thread(allow, unix=False, tcp=True) as proxy:
    print(proxy.port, flush=True)
    sys.stdin.read()
"""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        return


def get(port: int, path: str, via: int | None) -> float:
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", via or port, timeout=10)
    conn.request("GET", f"http://127.0.0.1:{port}{path}" if via else path)
    response = conn.getresponse()
    response.read()
    conn.close()
    assert response.status == 200, response.status
    return (time.perf_counter() - start) * 1000


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass(frozen=True)
class Plan:
    requests: int
    tunnels: int
    mib: int
    rounds: int
    rtt_ms: int
    link_mbit: int
    compare: tuple[str, ...] = ()
    floor: bool = False
    links: tuple[str, ...] = ("loopback", "wan")


def proxy_child(allowed: list[str], splice: str | None) -> Child:
    env = {"BENCH_SPLICE": splice} if splice else {}
    return Child(CHILD, *allowed, env=env)


def measure(plan: Plan) -> dict[str, Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    http_port = server.server_address[1]
    rtt = plan.rtt_ms / 1000
    wan = Link("wan", 2 * rtt, rtt, plan.link_mbit * 1e6 / 8)
    sinks = {
        "loopback": Child(SINK, "0", "0", "0"),
        "wan": Child(SINK, str(wan.handshake), str(wan.rtt), str(wan.rate)),
    }
    allowed = [f"127.0.0.1:{port}" for port in (http_port, *(sink.port for sink in sinks.values()))]
    proxies = {"proxied": proxy_child(allowed, None)}
    workdir = tempfile.mkdtemp(prefix="egress-bench-")
    try:
        if plan.floor and (relay := floor_relay(Path(workdir), BULK_PIPE)):
            proxies["C splice relay"] = relay
        for other in plan.compare:
            proxies[f"compared: {Path(other).name}"] = proxy_child(allowed, str(Path(other).resolve()))
        proxy_port = proxies["proxied"].port
        baseline_rss = peak_rss_mib(proxies["proxied"].process.pid)
        for _ in range(20):  # warm up both paths
            get(http_port, "/", None)
            get(http_port, "/", proxy_port)
        direct: list[float] = []
        proxied: list[float] = []
        for _ in range(plan.requests):  # alternating, so other work on the machine falls on both
            direct.append(get(http_port, "/", None))
            proxied.append(get(http_port, "/", proxy_port))
        size = plan.mib << 20
        links = {
            name: rounds(sink, proxies, plan.tunnels, size, plan.rounds)
            for name, sink in sinks.items()
            if name in plan.links
        }
        rss = peak_rss_mib(proxies["proxied"].process.pid)
    finally:
        for child in (*proxies.values(), *sinks.values()):
            child.close()
        server.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "requests": plan.requests,
        "tunnels": plan.tunnels,
        "mib": plan.mib,
        "rtt_ms": plan.rtt_ms,
        "link_mbit": plan.link_mbit,
        "direct_median_ms": statistics.median(direct),
        "direct_p99_ms": percentile(direct, 0.99),
        "proxied_median_ms": statistics.median(proxied),
        "proxied_p99_ms": percentile(proxied, 0.99),
        "links": links,
        "proxy_peak_rss_mib": rss,
        "proxy_idle_rss_mib": baseline_rss,
    }


def add_rows(found: dict[str, Any], report: Report) -> None:
    added_median = found["proxied_median_ms"] - found["direct_median_ms"]
    added_p99 = found["proxied_p99_ms"] - found["direct_p99_ms"]
    requests, tunnels, mib = found["requests"], found["tunnels"], found["mib"]
    rss = found["proxy_peak_rss_mib"]
    titles = {"loopback": "loopback", "wan": f"{found['rtt_ms']} ms RTT, {found['link_mbit']} Mbit/s shared link"}
    for name, value, unit, goal, ok, detail in (
        (
            f"egress: added latency, median of {requests:,} requests",
            added_median, "ms", "< 2 ms", added_median < 2,
            f"({found['proxied_median_ms']:.2f} vs {found['direct_median_ms']:.2f} ms direct)",
        ),
        (
            f"egress: added latency, p99 of {requests:,} requests",
            added_p99, "ms", "< 10 ms", added_p99 < 10,
            f"({found['proxied_p99_ms']:.2f} vs {found['direct_p99_ms']:.2f} ms direct)",
        ),
        *(
            (
                f"egress: {tunnels} CONNECT tunnels x {mib} MiB / direct, {titles[link]}{suffix}",
                round(found["links"][link][side]["ratio"] * 100, 1), "%",
                *((">= 80%", found["links"][link][side]["ratio"] >= 0.8) if side == "proxied" else ("", None)),
                describe(found["links"][link], side),
            )
            for link in found["links"]
            for side, suffix in ((side, "" if side == "proxied" else f" ({side})") for side in found["links"][link])
            if side != "direct" and side not in ("rounds", "samples")
        ),
        (
            "egress: proxy peak RSS", rss, "MiB", "< 30 MiB", rss < 30,
            f"(idle {found['proxy_idle_rss_mib']:.1f} MiB)",
        ),
    ):  # fmt: skip
        report.add(Row("egress", name, round(value, 2), unit, goal, ok, detail, found))


def figure_egress(settings: Settings, report: Report) -> None:
    plan = Plan(
        settings.egress_requests,
        settings.egress_tunnels,
        settings.egress_mib,
        settings.egress_rounds,
        rtt_ms=40,
        link_mbit=1000,
        floor=True,
    )
    add_rows(measure(plan), report)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--tunnels", type=int, default=64)
    parser.add_argument("--mib", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of direct and proxied tunnels")
    parser.add_argument("--rtt", type=int, default=40, help="round trip of the modelled link, ms")
    parser.add_argument("--link-mbit", type=int, default=1000, help="rate of the modelled link, shared")
    parser.add_argument(
        "--compare", action="append", default=[], help="another splice.py, run as one more proxy in the same rounds"
    )
    parser.add_argument("--floor", action="store_true", help="add bench/proxy/relay.c (the design in C) to the rounds")
    parser.add_argument("--links", default="loopback,wan", help="which links to measure tunnels on")
    args = parser.parse_args()
    compare = tuple(args.compare)
    plan = Plan(
        args.requests,
        args.tunnels,
        args.mib,
        args.rounds,
        args.rtt,
        args.link_mbit,
        compare,
        args.floor,
        tuple(args.links.split(",")),
    )
    found = measure(plan)
    add_rows(found, Report())
    print(json.dumps(found, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
