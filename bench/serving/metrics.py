"""The metrics figure: a ``/metrics`` scrape with 10,000 live sessions, and what a span costs with tracing off.

A real SQLite session store (WAL, on disk) holds 10,000 live sessions,
each with three credentials (one live session in ten with its revocations
``pending``), beside 10,000 ended ones (their credentials revoked), filled through the store's own
interface (synchronous off while filling only). One scrape is
``BrokerMetrics.exposition()`` with the store's collector registered and
every counter and histogram in use for three providers: the store's one
counting statement plus the text rendering. Then the same store is
``broker serve``'s and ``GET /metrics`` is asked on its socket, a
connection per scrape, after a sweep (none runs while measuring). The
figures are medians of repeated scrapes (goal: under 10 ms).

The span figures are in process: ``with span(name, 3 attributes)`` with
tracing off (the cost every instrumented step pays always), against an
empty ``with`` of a shared null context, and with tracing on (the
OpenTelemetry SDK batching to ``devstack.otlp`` in a process of its own),
each the median of batches.

Run alone: ``python -m bench.serving.metrics [--quick]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import BROKER, ROOT, WORK, Report, Row, Settings, median, summary
from broker.core.store.gauges import StoreGaugeReader
from broker.core.store.interface import SessionRecord
from broker.core.store.sqlite import SqliteSessionStore
from broker.core.store.states import CredentialState, SessionState
from broker.telemetry.metrics import BrokerMetrics
from broker.telemetry.scrape import StoreCollector
from broker.vocab import tracing

PROVIDERS = ("vault", "aws", "github")


def seed(path: Path, live: int, ended: int) -> SqliteSessionStore:
    """A store with ``live`` live sessions (3 credentials each) and ``ended`` revoked ones."""
    store = SqliteSessionStore(path)
    store.run_step(lambda conn: conn.execute("PRAGMA synchronous=OFF"))
    now = datetime.now(UTC)
    for n in range(live + ended):
        session_id = f"s-{n:016d}"
        state = SessionState.ACTIVE if n < live else SessionState.REVOKED
        store.create_session(
            SessionRecord(session_id, "bench", "1000", state, now, now + timedelta(hours=1), "/d", "/m", 1000, 1000,
                          False, None)
        )  # fmt: skip
        for provider in PROVIDERS:
            store.add_credential(session_id, provider, provider, provider, {})
            store.credential_minted(
                session_id, provider, reference={}, scope={}, expires_at=now + timedelta(hours=1), fingerprint="f"
            )
            if n >= live:  # an ended session's credentials are revoked, or a sweep would retry every one of them
                store.set_credential_state(session_id, provider, CredentialState.REVOKED)
            elif n % 10 == 0:  # pending in live sessions: a daemon's sweep leaves those to their end
                store.set_credential_state(session_id, provider, CredentialState.PENDING)
    store.run_step(lambda conn: conn.execute("PRAGMA synchronous=FULL"))
    return store


def watched(store: SqliteSessionStore) -> BrokerMetrics:
    metrics = BrokerMetrics()
    metrics.register(StoreCollector(StoreGaugeReader(store), metrics.providers))
    for provider in PROVIDERS:
        metrics.issued(provider, 1000)
        metrics.revoked(provider, 900)
        metrics.failed(provider, "revoke")
        for seconds in (0.004, 0.03, 0.2, 1.5):
            metrics.mint_seconds(provider, seconds)
            metrics.revoke_seconds(provider, seconds)
    for decision in ("allowed", "denied", "refused"):
        metrics.egress(decision, 5)
    return metrics


def timed(call: Callable[[], object], reps: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds (this thread's: SQLite runs on it) per call."""
    call()
    wall, cpu = [], []
    for _ in range(reps):
        start, start_cpu = time.perf_counter(), time.thread_time()
        call()
        wall.append(time.perf_counter() - start)
        cpu.append(time.thread_time() - start_cpu)
    return wall, cpu


def per_call(call: Callable[[], None], batches: int, batch: int) -> list[float]:
    """CPU seconds of this thread per call, one sample per batch (time the machine gave others is not counted)."""
    samples = []
    gc.disable()
    try:
        for _ in range(batches):
            start = time.thread_time()
            for _ in range(batch):
                call()
            samples.append((time.thread_time() - start) / batch)
    finally:
        gc.enable()
    return samples


def span_off() -> None:
    with tracing.span("provider.mint", provider="vault", credential="db", session="s-0123456789ab"):
        pass


NULL = contextlib.nullcontext()


def empty_with() -> None:
    with NULL:
        pass


def span_on_samples(batches: int, batch: int) -> list[float]:
    """``span_off``'s call with the SDK installed, exporting to a receiver in a process of its own."""
    from broker.telemetry.settings import TelemetryConfig
    from broker.telemetry.traces import start_tracing
    from devstack.net import free_port, wait_port

    port = free_port()
    receiver = subprocess.Popen(  # its decoding must not share this process's interpreter lock
        [sys.executable, "-m", "devstack.otlp", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL
    )
    try:
        wait_port(port)
        started = start_tracing(TelemetryConfig(f"http://127.0.0.1:{port}/v1/traces", timeout=5), host="bench")
        try:
            return per_call(span_off, batches, batch)
        finally:
            started.close(timeout=10)
    finally:
        receiver.terminate()
        receiver.wait(timeout=10)


def daemon_scrapes(state_dir: Path, reps: int) -> list[float]:
    """Wall seconds of ``GET /metrics`` on the socket of a ``broker serve`` whose store is ``state_dir``'s."""
    folder = state_dir.parent / "metrics-daemon"
    (folder / "policies").mkdir(parents=True)
    (folder / "run").mkdir(mode=0o700)
    socket_path = folder / "broker.sock"
    config = folder / "broker.toml"
    config.write_text(
        f'state_dir = "{state_dir}"\nruntime_dir = "{folder / "run"}"\npolicy_dir = "{folder / "policies"}"\n'
        f'audit_key = "{folder / "audit.key"}"\n[daemon]\nsocket = "{socket_path}"\nsweep_interval = "1h"\n'
    )
    daemon = subprocess.Popen([BROKER, "--config", str(config), "serve"], cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not socket_path.exists():
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise RuntimeError("broker serve did not start")
            time.sleep(0.05)
        exchange(socket_path, "POST /v1/sweep")  # waits for the sweep at start too: none runs while measuring
        wall, _ = timed(lambda: exchange(socket_path, "GET /metrics"), reps)
        return wall
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)


def exchange(path: Path, request: str) -> bytes:
    """One request on a connection of its own; the whole answer (an error status is an error here)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        sock.sendall(f"{request} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(1 << 16):
            answer += chunk
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"{request}: {answer[:200]!r}")
    return answer


def figure_metrics(settings: Settings, report: Report) -> None:
    measure(report, quick=settings.quick)


def measure(report: Report, *, quick: bool, live: int = 10_000) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=WORK, prefix="metrics-") as folder:
        print(f"  seeding {live:,} live and {live:,} ended sessions", flush=True)
        store = seed(Path(folder) / "sessions.db", live, live)
        try:
            metrics = watched(store)
            reps = 21 if quick else 101
            scrape, scrape_cpu = timed(metrics.exposition, reps)
            query, _ = timed(StoreGaugeReader(store).gauge_counts, reps)
            size = len(metrics.exposition())
        finally:
            store.close()
        served = daemon_scrapes(Path(folder), reps)
    value = median(scrape) * 1e3
    report.add(
        Row("metrics", f"/metrics scrape, {live:,} live sessions", round(value, 2), "ms", "< 10 ms", value < 10,
            f"{size:,} bytes; CPU {median(scrape_cpu) * 1e3:.2f} ms, fastest {min(scrape) * 1e3:.2f} ms;"
            f" the store's counting statement alone {median(query) * 1e3:.2f} ms", summary(scrape))
    )  # fmt: skip
    value = median(served) * 1e3
    report.add(
        Row("metrics", f"/metrics scrape through broker serve's socket, {live:,} live sessions", round(value, 2), "ms",
            "< 10 ms", value < 10, f"a connection per scrape, as root; fastest {min(served) * 1e3:.2f} ms",
            summary(served))
    )  # fmt: skip
    batches, batch = (11, 20_000) if quick else (31, 50_000)
    off = per_call(span_off, batches, batch)
    bare = per_call(empty_with, batches, batch)
    report.add(
        Row("metrics", "span() with tracing off, per call (CPU)", round(median(off) * 1e9), "ns", "", None,
            f"an empty with-statement: {median(bare) * 1e9:.0f} ns", summary(off))
    )  # fmt: skip
    on = span_on_samples(batches, batch // 10)
    report.add(
        Row("metrics", "span() with tracing on (OpenTelemetry SDK), per call (CPU)", round(median(on) * 1e6, 1),
            "us", "", None, "3 attributes, batched to an OTLP/HTTP receiver on loopback", summary(on))
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serving.metrics", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--live", type=int, default=10_000)
    args = parser.parse_args()
    measure(Report(), quick=args.quick, live=args.live)
    return 0


if __name__ == "__main__":
    sys.exit(main())
