"""Tunnel throughput for the egress figure: direct vs through the proxy, alternating rounds, and where the CPU goes.

Each round moves ``tunnels`` x ``size`` bytes once directly to a sink and
once through the proxy's CONNECT tunnels (the order alternates between
rounds, so drift from other work on the machine falls on both sides); the
figure is the median of the per-round ratios with their spread. Each side
records the CPU seconds of the proxy (a child process), of the sink (a child
process), of the load generator (this process: the senders' threads), and
what the rest of the machine used meanwhile (``/proc/stat`` minus those), and
the load average when the round started.

Two links: ``loopback`` (the sink on 127.0.0.1, nothing in between: the
proxy's own cost, on the same cores as sender and sink) and a modelled
``wan``: the sink is a far server behind a shared link of ``rate`` bytes/s
(one token bucket for every connection, so the link is the bottleneck as it
is for a sandbox host's egress), which starts reading a connection only
after ``handshake`` (TCP + TLS 1.3: two round trips) and answers one round
trip after the last byte. The proxy stays next to the sender, as it does in
a deployment. This kernel has no ``netem``, so the delay is modelled at the
sink rather than in the network: window growth (slow start) is not.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import ROOT

SINK = """
import socket, sys, threading, time
handshake, rtt, rate = (float(a) for a in sys.argv[1:4])
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1024)
print(listener.getsockname()[1], flush=True)
link = threading.Lock()
free_at = [0.0]

def occupy(n):
    with link:
        start = max(time.monotonic(), free_at[0])
        free_at[0] = start + n / rate
    time.sleep(max(0.0, free_at[0] - time.monotonic()))

def drain(conn):
    with conn:
        time.sleep(handshake)
        while data := conn.recv(65536 if rate else 1 << 20):
            if rate:
                occupy(len(data))
        time.sleep(rtt)
        conn.sendall(b"k")

def accept():
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=drain, args=(conn,), daemon=True).start()

threading.Thread(target=accept, daemon=True).start()
sys.stdin.read()
"""

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Link:
    name: str
    handshake: float  # seconds before the far end reads a new connection
    rtt: float  # seconds
    rate: float  # bytes/s on the shared link; 0: unlimited


class Child:
    """A helper process that prints its port first and runs until its stdin closes (Python code, or ``argv``)."""

    def __init__(self, code: str, *args: str, env: dict[str, str] | None = None, argv: list[str] | None = None) -> None:
        self.process = subprocess.Popen(
            argv or [sys.executable, "-c", code, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)


def floor_relay(workdir: Path, pipe_bytes: int) -> Child | None:
    """``bench/proxy/relay.c`` compiled and started: the same design in C, nothing else; None without a C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    binary = workdir / "relay"
    subprocess.run(
        [compiler, "-O2", "-pthread", "-o", str(binary), str(ROOT / "bench" / "proxy" / "relay.c")], check=True
    )
    return Child("", argv=[str(binary), str(pipe_bytes)])


def machine_busy() -> float:
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / TICK


def self_cpu() -> float:
    times = os.times()
    return times.user + times.system


def send_all(port: int, via: int | None, size: int) -> None:
    with socket.create_connection(("127.0.0.1", via or port), timeout=120) as sock:
        if via:
            sock.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        block = b"\0" * (1 << 20)
        for _ in range(size >> 20):
            sock.sendall(block)
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b"k"


def side(sink: Child, proxy: Child | None, tunnels: int, size: int) -> dict[str, float]:
    """One side of a round: rate in MiB/s and the CPU seconds per GiB moved of each party."""
    load = os.getloadavg()[0]
    parties = {"proxy": proxy.cpu if proxy else (lambda: 0.0), "sink": sink.cpu, "senders": self_cpu}
    before = {name: read() for name, read in parties.items()}
    busy = machine_busy()
    threads = [
        threading.Thread(target=send_all, args=(sink.port, proxy.port if proxy else None, size)) for _ in range(tunnels)
    ]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    gib = tunnels * size / (1 << 30)
    found = {name: (read() - before[name]) / gib for name, read in parties.items()}
    found["others_cores"] = ((machine_busy() - busy) - sum(found.values()) * gib) / elapsed
    found["mib_s"] = tunnels * size / (1 << 20) / elapsed
    found["load1"] = load
    return found


def rounds(sink: Child, proxies: dict[str, Child], tunnels: int, size: int, count: int) -> dict[str, Any]:
    """``count`` rounds of direct and every proxy, the order rotating each round; medians, spreads, samples."""
    sides = ["direct", *proxies]
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    for number in range(count):
        shift = number % len(sides)
        for name in sides[shift:] + sides[:shift]:
            samples[name].append(side(sink, proxies.get(name), tunnels, size))
    found: dict[str, Any] = {"rounds": count, "samples": samples}
    for name in sides:
        rates = [s["mib_s"] for s in samples[name]]
        ratios = [s["mib_s"] / d["mib_s"] for s, d in zip(samples[name], samples["direct"], strict=True)]
        found[name] = {
            "mib_s": statistics.median(rates),
            "ratio": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "cpu_s_per_gib": {
                key: round(statistics.median(s[key] for s in samples[name]), 3) for key in ("proxy", "sink", "senders")
            },
            "others_cores": round(statistics.median(s["others_cores"] for s in samples[name]), 2),
            "load1": [round(s["load1"], 2) for s in samples[name]],
        }
    return found


def describe(found: dict[str, Any], name: str) -> str:
    side_, direct = found[name], found["direct"]
    cpu = ", ".join(f"{k} {v:.2f}" for k, v in side_["cpu_s_per_gib"].items())
    direct_cpu = ", ".join(f"{k} {v:.2f}" for k, v in direct["cpu_s_per_gib"].items() if k != "proxy")
    return (
        f"({side_['mib_s']:.0f} vs {direct['mib_s']:.0f} MiB/s, median of {found['rounds']} alternating rounds,"
        f" ratio {side_['ratio_min'] * 100:.0f}-{side_['ratio_max'] * 100:.0f}%;"
        f" CPU s/GiB proxied: {cpu}; direct: {direct_cpu}; cores busy with other work"
        f" {side_['others_cores']:.2f} / {direct['others_cores']:.2f};"
        f" load {min(side_['load1']):.1f}-{max(side_['load1']):.1f})"
    )
