"""The egress figure, on loopback: added latency per request, tunnel throughput, the proxy's memory.

Part of ``scripts/bench`` (``--only egress``; ``--quick`` makes it small), or alone:

    .venv/bin/python -m bench.egress [--requests 1000] [--tunnels 64] [--mib 10]

The proxy runs in a child process of its own (so its peak RSS is its own),
allowing one local HTTP server and one local sink. Latency: ``--requests``
sequential GETs directly and through the proxy (plain-HTTP forwarding, a new
connection each, as curl makes them); the figure is the difference of the
medians and of the p99s. Throughput: ``--tunnels`` concurrent CONNECT
tunnels each sending ``--mib`` MiB to a sink that discards it, against the
same number of direct connections. Every loop is bounded; only loopback is
used.
"""

from __future__ import annotations

import argparse
import http.client
import socket
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.common import ROOT, Report, Row, Settings

CHILD = """
import sys, time
from broker.egress.destinations import parse_destination
from broker.egress.running import running_proxy
allow = tuple(parse_destination(a) for a in sys.argv[1:])
with running_proxy(allow, unix=False, tcp=True) as proxy:
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


def sink_server() -> tuple[socket.socket, int]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(256)

    def drain(conn: socket.socket) -> None:
        with conn:
            while conn.recv(1 << 20):
                pass

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=drain, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener, listener.getsockname()[1]


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


def send_all(port: int, via: int | None, size: int) -> None:
    with socket.create_connection(("127.0.0.1", via or port), timeout=60) as sock:
        if via:
            sock.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        block = b"\0" * (1 << 20)
        for _ in range(size >> 20):
            sock.sendall(block)
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1)


def throughput(port: int, via: int | None, tunnels: int, size: int) -> float:
    threads = [threading.Thread(target=send_all, args=(port, via, size)) for _ in range(tunnels)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return tunnels * size / (1 << 20) / (time.perf_counter() - start)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(requests: int, tunnels: int, mib: int) -> dict[str, Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    http_port = server.server_address[1]
    listener, sink_port = sink_server()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, f"127.0.0.1:{http_port}", f"127.0.0.1:{sink_port}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert child.stdout is not None
        proxy_port = int(child.stdout.readline())
        baseline_rss = peak_rss_mib(child.pid)
        for _ in range(20):  # warm up both paths
            get(http_port, "/", None)
            get(http_port, "/", proxy_port)
        direct = [get(http_port, "/", None) for _ in range(requests)]
        proxied = [get(http_port, "/", proxy_port) for _ in range(requests)]
        size = mib << 20
        direct_rate = throughput(sink_port, None, tunnels, size)
        tunnel_rate = throughput(sink_port, proxy_port, tunnels, size)
        rss = peak_rss_mib(child.pid)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=30)
        listener.close()
        server.shutdown()
    return {
        "requests": requests,
        "tunnels": tunnels,
        "mib": mib,
        "direct_median_ms": statistics.median(direct),
        "direct_p99_ms": percentile(direct, 0.99),
        "proxied_median_ms": statistics.median(proxied),
        "proxied_p99_ms": percentile(proxied, 0.99),
        "direct_mib_s": direct_rate,
        "tunnel_mib_s": tunnel_rate,
        "proxy_peak_rss_mib": rss,
        "proxy_idle_rss_mib": baseline_rss,
    }


def add_rows(found: dict[str, Any], report: Report) -> None:
    added_median = found["proxied_median_ms"] - found["direct_median_ms"]
    added_p99 = found["proxied_p99_ms"] - found["direct_p99_ms"]
    requests, tunnels, mib = found["requests"], found["tunnels"], found["mib"]
    ratio = found["tunnel_mib_s"] / found["direct_mib_s"]
    rss = found["proxy_peak_rss_mib"]
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
        (
            f"egress: {tunnels} CONNECT tunnels x {mib} MiB / direct",
            round(ratio * 100, 1), "%", ">= 80%", ratio >= 0.8,
            f"({found['tunnel_mib_s']:.0f} vs {found['direct_mib_s']:.0f} MiB/s)",
        ),
        (
            "egress: proxy peak RSS", rss, "MiB", "< 30 MiB", rss < 30,
            f"(idle {found['proxy_idle_rss_mib']:.1f} MiB)",
        ),
    ):  # fmt: skip
        report.add(Row("egress", name, round(value, 2), unit, goal, ok, detail, found))


def figure_egress(settings: Settings, report: Report) -> None:
    add_rows(measure(settings.egress_requests, settings.egress_tunnels, settings.egress_mib), report)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--tunnels", type=int, default=64)
    parser.add_argument("--mib", type=int, default=10)
    args = parser.parse_args()
    add_rows(measure(args.requests, args.tunnels, args.mib), Report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
