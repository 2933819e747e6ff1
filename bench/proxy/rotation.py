"""Rotation under load: a proxied token swapped behind its placeholder while 50 requests/s go through the proxy.

Part of ``scripts/bench`` (``--only rotation``), or alone: ``python -m
bench.proxy.rotation [--quick]``. The session's proxy terminates one loopback
host for a GitHub-shaped token (the header swap); the upstream (TLS,
keep-alive) answers 200 only for a token it holds valid and 401 for any
other, as GitHub does for a revoked one. A client keeps one tunnel and sends
50 requests/s with the placeholder. Windows of two seconds alternate: in one
the token is rotated every half second as the broker does it (the new one
made valid, ``Interceptor.rotate``, the old one revoked ``GRACE`` seconds
later), in the other nothing changes. The figures: requests that failed
(anything but 200) in the rotating windows, and what a rotation adds to the
slowest request: for each rotating window, its slowest request minus the
slowest of the steady window just before it, the median over the pairs. The
slowest of a window is the tail of ~100 requests, where a collector's pause
or a scheduler's hiccup lands as often without a rotation as with one; a
pair of neighbouring windows sees the same machine, and the median over
fifteen pairs says what the rotation itself adds, which one maximum against another
does not (the overall slowest of each side is shown beside it).
"""

from __future__ import annotations

import argparse
import http.client
import os
import secrets
import ssl
import statistics
import string
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.common import WORK, Report, Row, Settings
from broker.core.running.rotating import GRACE
from broker.egress.destinations import parse_destination
from broker.egress.injectors.swap import Injection
from broker.egress.proxy.thread import proxy_thread
from broker.egress.terminate.ca import SessionCA
from broker.egress.terminate.interceptor import Interceptor
from broker.vocab.secret import Secret

RATE = 50
WINDOW = 2.0
EVERY = 0.5  # a rotation every half second in a rotating window
PLACEHOLDER = "ghs_" + "p" * 36


def token() -> str:
    return "ghs_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))


class Valid:
    """The tokens the upstream accepts (the provider's view: minted and not yet revoked)."""

    def __init__(self, first: str) -> None:
        self.tokens = {first}
        self.lock = threading.Lock()

    def revoke(self, value: str) -> None:
        with self.lock:
            self.tokens.discard(value)

    def __contains__(self, value: str) -> bool:
        with self.lock:
            return value in self.tokens


def serve_upstream(valid: Valid) -> tuple[ThreadingHTTPServer, int, bytes]:
    ca = SessionCA(["127.0.0.1"], datetime.now(UTC) + timedelta(hours=1), label="bench upstream")
    context = ca.server_context("127.0.0.1")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            scheme, _, credential = (self.headers.get("Authorization") or "").partition(" ")
            status = 200 if scheme == "token" and credential in valid else 401
            body = b'{"ok": true}' if status == 200 else b'{"message": "Bad credentials"}'
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def get_request(self) -> tuple[Any, Any]:
            sock, address = self.socket.accept()
            return context.wrap_socket(sock, server_side=True), address

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_address[1]), ca.pem


def run(work: Path, windows: int) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    current = token()
    valid = Valid(current)
    server, port, upstream_pem = serve_upstream(valid)
    (work / "upstream-ca.pem").write_bytes(upstream_pem)
    plan = Interceptor(lambda hosts: SessionCA(hosts, datetime.now(UTC) + timedelta(hours=1)))
    plan.add(
        Injection(
            frozenset({("127.0.0.1", port)}),
            Secret(PLACEHOLDER),
            Secret(current),
            work / "upstream-ca.pem",
            name="repo",
        )
    )
    (work / "session-ca.pem").write_bytes(plan.ca.pem)
    sides: dict[str, list[float]] = {"rotating": [], "steady": []}
    by_window: list[list[float]] = []  # each window's request times, in order (steady, rotating, steady, ...)
    near: list[float] = []  # the requests begun within 100 ms after a rotation
    last_rotation = 0.0
    failed = {"rotating": 0, "steady": 0}
    rotations = 0
    with proxy_thread((parse_destination(f"127.0.0.1:{port}"),), unix=False, tcp=True, interceptor=plan) as proxy:
        assert proxy.port is not None
        context = ssl.create_default_context(cafile=str(work / "session-ca.pem"))
        connection = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=context, timeout=30)
        connection.set_tunnel("127.0.0.1", port)
        for window in range(windows):
            side = "rotating" if window % 2 else "steady"
            start = time.perf_counter()
            next_rotation = start + EVERY / 2
            sent = 0
            by_window.append([])
            while (now := time.perf_counter()) < start + WINDOW:
                if side == "rotating" and now >= next_rotation:
                    old, current = current, token()
                    with valid.lock:
                        valid.tokens.add(current)  # minted
                    plan.rotate("repo", Secret(current))
                    threading.Timer(GRACE, valid.revoke, (old,)).start()  # revoked once the grace is over
                    rotations += 1
                    last_rotation = time.perf_counter()
                    next_rotation += EVERY
                due = start + sent / RATE
                if now < due:
                    time.sleep(due - now)
                begun = time.perf_counter()
                try:
                    connection.request(
                        "GET", "/installation/repositories", headers={"Authorization": f"token {PLACEHOLDER}"}
                    )
                    response = connection.getresponse()
                    response.read()
                    ok = response.status == 200
                except (OSError, http.client.HTTPException):
                    ok = False
                took = (time.perf_counter() - begun) * 1000
                sides[side].append(took)
                by_window[-1].append(took)
                if side == "rotating" and begun - last_rotation < 0.1:
                    near.append(took)
                failed[side] += 0 if ok else 1
                sent += 1
        connection.close()
    server.shutdown()
    slowest = {side: max(values) for side, values in sides.items()}
    pairs = [max(by_window[i + 1]) - max(by_window[i]) for i in range(0, len(by_window) - 1, 2)]
    return {
        "requests": {side: len(values) for side, values in sides.items()},
        "failed": failed,
        "rotations": rotations,
        "slowest_ms": slowest,
        "median_ms": {side: sorted(values)[len(values) // 2] for side, values in sides.items()},
        "p99_ms": {side: sorted(values)[int(len(values) * 0.99)] for side, values in sides.items()},
        "near_rotation": {"n": len(near), "slowest_ms": max(near, default=0.0)},
        "load_average": list(os.getloadavg()),
        "added_slowest_ms": statistics.median(pairs),
        "added_by_pair_ms": pairs,
    }


def add_rows(result: dict[str, Any], report: Report) -> None:
    added, lost = result["added_slowest_ms"], result["failed"]["rotating"]
    report.add(
        Row(
            "rotation",
            f"rotation: a token swapped behind its placeholder under {RATE} requests/s, slowest request added"
            " (median over window pairs)",
            round(added, 2),
            "ms",
            "< 5 ms, no request lost",
            added < 5 and lost == 0 and result["failed"]["steady"] == 0,
            f"({result['rotations']} rotations, old tokens revoked {GRACE:.0f} s after each;"
            f" {result['requests']['rotating']} requests while rotating, {lost} failed; added by pair"
            f" {min(result['added_by_pair_ms']):.1f} to {max(result['added_by_pair_ms']):.1f} ms;"
            f" slowest {result['slowest_ms']['rotating']:.2f} ms rotating vs {result['slowest_ms']['steady']:.2f} ms"
            f" steady; p99 {result['p99_ms']['rotating']:.2f} vs {result['p99_ms']['steady']:.2f} ms; medians"
            f" {result['median_ms']['rotating']:.2f} vs {result['median_ms']['steady']:.2f} ms; the"
            f" {result['near_rotation']['n']} requests begun within 100 ms after a rotation: slowest"
            f" {result['near_rotation']['slowest_ms']:.2f} ms; {WINDOW:.0f} s windows alternating; load average"
            f" {result['load_average'][0]:.1f} on this machine's cores)",
            result,
        )
    )


def figure_rotation(settings: Settings, report: Report) -> None:
    work = Path(tempfile.mkdtemp(prefix="rotation-", dir=WORK if WORK.exists() else None))
    add_rows(run(work, 4 if settings.quick else 30), report)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    report = Report()
    work = Path(tempfile.mkdtemp(prefix="rotation-"))
    add_rows(run(work, 4 if args.quick else 30), report)
    return 0 if all(row.ok is not False for row in report.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
