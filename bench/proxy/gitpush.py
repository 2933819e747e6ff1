"""A 50 MiB ``git push`` through the session's proxy (operations checking it) against the same push direct.

The upstream is ``git http-backend`` behind TLS (``devstack.git_http``) in a
child process, reached through a modelled link, also a child: a TCP relay
that delays every byte by half the round trip each way and lets it through
no faster than the link's rate (one token bucket per direction, shared by
every connection, as a sandbox host's egress is), holding at most a
bandwidth-delay product's worth in flight (what TCP's window allows). The
proxy (``bench.proxy.terminated.ProxyChild``, with the git operations
``push: refs/heads/agent/*`` and every request logged) stays next to the
client, as it does in a deployment. Each round pushes one commit holding
50 MiB of random bytes (stored, not deflated: the figure is the transport,
not zlib) to a fresh bare repository, once direct and once through the
proxy, the order alternating; the figure is the median of the per-round
ratios of throughput (pack bytes over the push's wall time). On loopback
too, for what the proxy costs when the link is not the bottleneck.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.common import Report, Row, Settings
from bench.proxy.proxychild import ProxyChild
from bench.proxy.tunnels import Child

GIT_UPSTREAM = """
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from broker.egress.terminate.ca import SessionCA
from devstack.git_http import GitHTTPServer
ca = SessionCA(["127.0.0.1"], datetime.now(UTC) + timedelta(hours=2), label="bench git")
Path(sys.argv[2]).write_bytes(ca.pem)
with GitHTTPServer(Path(sys.argv[1]), context=ca.server_context("127.0.0.1")) as server:
    print(server.port, flush=True)
    sys.stdin.read()
"""

LINK = """
import socket, sys, threading, time, collections
target, delay, rate, window = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)

class Direction:
    def __init__(self):
        self.lock = threading.Lock()
        self.free_at = 0.0
    def stamp(self, size):
        with self.lock:
            now = time.monotonic()
            self.free_at = max(now, self.free_at) + (size / rate if rate else 0)
            return self.free_at + delay

up, down = Direction(), Direction()

def carry(source, sink, direction):
    queue, cond, held, done = collections.deque(), threading.Condition(), [0], [False]
    def reader():
        try:
            while data := source.recv(65536):
                with cond:
                    while held[0] > window:
                        cond.wait()
                    queue.append((direction.stamp(len(data)), data))
                    held[0] += len(data)
                    cond.notify_all()
        except OSError:
            pass
        with cond:
            done[0] = True
            cond.notify_all()
    def writer():
        while True:
            with cond:
                while not queue and not done[0]:
                    cond.wait()
                if not queue:
                    break
                at, data = queue.popleft()
            time.sleep(max(0.0, at - time.monotonic()))
            try:
                sink.sendall(data)
            except OSError:
                break
            with cond:
                held[0] -= len(data)
                cond.notify_all()
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
    threading.Thread(target=reader, daemon=True).start()
    threading.Thread(target=writer, daemon=True).start()

def accept():
    while True:
        client, _ = listener.accept()
        server = socket.create_connection(("127.0.0.1", target))
        for end in (client, server):
            end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        carry(client, server, up)
        carry(server, client, down)

threading.Thread(target=accept, daemon=True).start()
sys.stdin.read()
"""

HERMETIC = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}
OPERATIONS = {"git": {"hosts": ["127.0.0.1:{port}"], "push": ["refs/heads/agent/*"], "delete": False}}


def git(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {"PATH": os.environ["PATH"], "HOME": "/tmp", **HERMETIC, **(env or {})}
    return subprocess.run(["git", *args], cwd=cwd, env=environment, capture_output=True, text=True, check=True)


def work_tree(work: Path, mib: int) -> Path:
    tree = work / "tree"
    git("init", "--quiet", "--initial-branch=main", str(tree))
    (tree / "blob.bin").write_bytes(os.urandom(mib << 20))
    git("-c", "core.compression=0", "add", "blob.bin", cwd=tree)
    git("commit", "--quiet", "-m", "50 MiB", cwd=tree)
    return tree


def push(tree: Path, url: str, env: dict[str, str]) -> tuple[float, int]:
    """Seconds for ``git push`` of HEAD to a new agent branch, and the pack's size."""
    start = time.perf_counter()
    done = git("-c", "pack.compression=0", "-c", "core.compression=0", "push", "--porcelain", url,
               "HEAD:refs/heads/agent/bench", cwd=tree, env=env)  # fmt: skip
    elapsed = time.perf_counter() - start
    assert "refs/heads/agent/bench" in done.stdout, done.stdout + done.stderr
    size = sum(p.stat().st_size for p in tree.glob(".git/objects/pack/*.pack")) or (50 << 20)
    return elapsed, size


def bare(root: Path, name: str) -> None:
    repository = root / name
    git("init", "--quiet", "--bare", str(repository))
    git("config", "http.receivepack", "true", cwd=repository)


def measure_link(work: Path, tree: Path, rounds: int, delay: float, rate: float, window: int) -> dict[str, Any]:
    root = work / "repos"
    root.mkdir(parents=True, exist_ok=True)
    upstream = Child(GIT_UPSTREAM, str(root), str(work / "git-ca.pem"))
    link = Child(LINK, str(upstream.port), str(delay), str(rate), str(window))
    proxy = ProxyChild(work / "proxy", link.port, work / "git-ca.pem", operations=OPERATIONS, credential=False)
    direct_env = {"GIT_SSL_CAINFO": str(work / "git-ca.pem")}
    proxied_env = {"GIT_SSL_CAINFO": str(proxy.ca_file), "https_proxy": f"http://127.0.0.1:{proxy.port}"}
    samples: dict[str, list[float]] = {"direct": [], "proxied": []}
    size = 0
    try:
        for number in range(rounds):
            order = ("direct", "proxied") if number % 2 == 0 else ("proxied", "direct")
            for side in order:
                name = f"{side}-{number}.git"
                bare(root, name)
                env = direct_env if side == "direct" else proxied_env
                elapsed, size = push(tree, f"https://127.0.0.1:{link.port}/{name}", env)
                samples[side].append(elapsed)
        stats = proxy.stats()
    finally:
        proxy.close()
        link.close()
        upstream.close()
    ratios = [d / p for d, p in zip(samples["direct"], samples["proxied"], strict=True)]
    return {
        "pack_mib": size / (1 << 20),
        "direct_s": statistics.median(samples["direct"]),
        "proxied_s": statistics.median(samples["proxied"]),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "records": stats["final"]["written"],
        "samples": samples,
    }


def measure_push(work: Path, *, quick: bool, report: Report, rtt_ms: int = 40, link_mbit: int = 1000) -> None:
    work.mkdir(parents=True, exist_ok=True)
    mib = 8 if quick else 50
    rounds = 2 if quick else 5
    tree = work_tree(work, mib)
    rate = link_mbit * 1e6 / 8
    window = int(rate * rtt_ms / 1000) + (1 << 20)
    links = {
        f"{rtt_ms} ms RTT, {link_mbit} Mbit/s link": measure_link(
            work / "wan", tree, rounds, rtt_ms / 2000, rate, window
        ),
        "loopback": measure_link(work / "loopback", tree, rounds, 0.0, 0.0, 64 << 20),
    }
    for title, found in links.items():
        ok = found["ratio"] >= 0.8 if "link" in title else None
        report.add(
            Row(
                "terminated",
                f"terminated: a {found['pack_mib']:.0f} MiB git push through the proxy / direct, {title}",
                round(found["ratio"] * 100, 1),
                "%",
                ">= 80%" if ok is not None else "",
                ok,
                f"({found['proxied_s']:.2f} vs {found['direct_s']:.2f} s, median of {rounds} alternating rounds,"
                f" ratio {found['ratio_min'] * 100:.0f}-{found['ratio_max'] * 100:.0f}%; the proxy checked every"
                f" push's ref updates and logged {found['records']} requests)",
                {k: v for k, v in found.items() if k != "samples"} | {"samples": json.dumps(found["samples"])},
            )
        )


def figure_gitpush(settings: Settings, report: Report, work: Path) -> None:
    measure_push(work, quick=settings.quick, report=report)
