"""The latency figure: the stack task through the daemon and the direct CLI against the three-provider floor.

Part of ``scripts/bench`` (``--only latency``), or alone with the stack it starts
itself (``python -m bench.stack_rtt [--runs 9] [--rtt 40]``). Twice: on loopback
(the servers themselves) and with every provider behind a latency proxy
(``--rtt`` ms per request, a connection's first request 2 x RTT more for TCP
+ TLS; the same proxies for every side). Each time one broker installation
(``bench/local.py``), a ``broker serve`` on it, and ``bench/floor.py`` (Vault,
AWS, GitHub one after another, as a hand-written launcher would) take turns,
each a cold process as a launcher starts it:

  floor         ``bench/floor.py issue`` / ``revoke``
  thin client   ``broker issue --json`` / ``revoke --json`` with ``[daemon] socket`` set
  direct CLI    the same commands without a daemon (the embedded default)
  daemon answer ``POST /v1/sessions`` / ``DELETE`` on the socket from this process (no process start)

Besides the medians it records the connections and requests each side
opened at each provider (with the proxies): a warm daemon opens none.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from bench.common import BROKER, FLOOR, PYTHON, WORK, Report, Row, Settings, median, must, run
from bench.daemon import http, wait
from bench.local import BrokerSetup, Stack, Urls, base_env, floor_params, stack_urls
from tests.fixtures.latencyproxy import LatencyProxy, latency_proxy
from tests.fixtures.slowproxy import SlowProxy, slow_proxy

SIDES = ("floor", "thin client", "direct CLI", "daemon answer")
HANDSHAKE_RTTS = 2.0  # TCP + TLS 1.3


def port(url: str) -> int:
    found = urlsplit(url).port
    assert found is not None
    return found


@contextlib.contextmanager
def proxies(stack: Stack, rtt_ms: float) -> Iterator[tuple[Urls, Callable[[], dict[str, int]]]]:
    """The providers' URLs (behind latency proxies when ``rtt_ms``) and a counter of connections and requests."""
    if not rtt_ms:
        yield stack_urls(stack), dict
        return
    rtt = rtt_ms / 1000
    base = stack_urls(stack)
    with (
        slow_proxy(port(base.vault), rtt, every_request=True, handshake=HANDSHAKE_RTTS * rtt) as vault,
        latency_proxy(port(base.aws), rtt, HANDSHAKE_RTTS * rtt) as aws,
        slow_proxy(port(base.github), rtt, every_request=True, handshake=HANDSHAKE_RTTS * rtt) as github,
    ):

        def counts(v: SlowProxy = vault, a: LatencyProxy = aws, g: SlowProxy = github) -> dict[str, int]:
            return {
                "vault_connections": v.connections,
                "vault_requests": v.requests,
                "aws_connections": a.connections,
                "aws_requests": len(a.actions),
                "github_connections": g.connections,
                "github_requests": g.requests,
            }

        yield Urls(vault.addr, aws.addr, github.addr), counts


def measure(stack: Stack, runs: int, rtt_ms: float, label: str) -> dict[str, Any]:
    """Median ms of each side's issue and revoke, and the connections and requests of their last run."""
    env = base_env()
    samples: dict[str, list[float]] = {f"{side}/{kind}": [] for side in SIDES for kind in ("issue", "revoke")}
    opened: dict[str, dict[str, int]] = {}
    with proxies(stack, rtt_ms) as (urls, counts):
        setup = BrokerSetup(f"latency-{label}", stack).create(urls=urls)
        sock = setup.dir / "broker.sock"
        daemon_config = setup.dir / "daemon.toml"
        daemon_config.write_text(setup.config.read_text() + f'\n[daemon]\nsocket = "{sock}"\n')
        floor_dir = Path("/dev/shm") / f"broker-bench-latency-{os.getpid()}"
        floor_dir.mkdir(mode=0o711, exist_ok=True)
        params = floor_params(stack, floor_dir, setup, urls, name=f"floor-{label}.json")
        task = yaml.safe_load(setup.task.read_text())
        daemon = subprocess.Popen([BROKER, "--config", str(daemon_config), "serve"], env=env, stderr=subprocess.DEVNULL)

        def timed(side: str, kind: str, action: Callable[[], str], record: bool) -> str:
            before = counts()
            started = time.perf_counter()
            out = action()
            if record:
                samples[f"{side}/{kind}"].append(time.perf_counter() - started)
                after = counts()
                opened[f"{side}/{kind}"] = {k: after[k] - before[k] for k in after}
            return out

        def broker(config: Path, *args: str) -> Callable[[], str]:
            def act() -> str:
                return must(run([BROKER, "--config", str(config), *args], env=env), f"broker {args[0]}").stdout.decode()

            return act

        def cli_cycle(side: str, config: Path, record: bool) -> None:
            out = timed(side, "issue", broker(config, "issue", "--task", str(setup.task), "--json"), record)
            session = json.loads(out)["session"]
            report = json.loads(timed(side, "revoke", broker(config, "revoke", "--session", session, "--json"), record))
            if not report["dir_removed"] or any(c["outcome"] != "revoked" for c in report["credentials"]):
                raise RuntimeError(f"bench.stack_rtt: {side} revoke of {session}: {report}")

        def floor_cycle(record: bool) -> None:
            issue = [PYTHON, FLOOR, "issue", str(params)]
            directory = timed(
                "floor", "issue", lambda: must(run(issue, env=env), "floor issue").stdout.decode(), record
            )
            revoke = [PYTHON, FLOOR, "revoke", str(params), directory.strip()]
            timed("floor", "revoke", lambda: must(run(revoke, env=env), "floor revoke").stdout.decode(), record)

        def answer_cycle(record: bool) -> None:
            def issue() -> str:
                status, document = http(sock, "POST", "/v1/sessions", task)
                if status != 201:
                    raise RuntimeError(f"bench.stack_rtt: the daemon answered {status}: {document}")
                return str(document["session"])

            def revoke(session: str) -> str:
                status, document = http(sock, "DELETE", f"/v1/sessions/{session}")
                if status != 200:
                    raise RuntimeError(f"bench.stack_rtt: the daemon revoke answered {status}: {document}")
                return ""

            session = timed("daemon answer", "issue", issue, record)
            timed("daemon answer", "revoke", lambda: revoke(session), record)

        cycles: list[Callable[[bool], None]] = [
            floor_cycle,
            lambda record: cli_cycle("thin client", daemon_config, record),
            lambda record: cli_cycle("direct CLI", setup.config, record),
            answer_cycle,
        ]
        try:
            wait(sock.exists, "the daemon")
            for rep in range(runs + 1):  # the first round warms caches and the daemon's clients, untimed
                shift = rep % len(cycles)
                for cycle in cycles[shift:] + cycles[:shift]:
                    stack.reset_deny()
                    cycle(rep > 0)
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
            shutil.rmtree(floor_dir, ignore_errors=True)
    medians = {name: round(median(values) * 1000, 1) for name, values in samples.items()}
    return {"rtt_ms": rtt_ms, "runs": runs, "median_ms": medians, "opened": opened,
            "samples_ms": {k: [round(v * 1000, 1) for v in vs] for k, vs in samples.items()}}  # fmt: skip


def add_rows(found: dict[str, Any], label: str, report: Report) -> None:
    ms = found["median_ms"]
    for kind in ("issue", "revoke"):
        floor = ms[f"floor/{kind}"]
        for side, goal in (
            ("thin client", 0.3),
            ("daemon answer", None),
            ("direct CLI", 0.7 if found["rtt_ms"] else None),
        ):
            ratio = ms[f"{side}/{kind}"] / floor
            conns = found["opened"].get(f"{side}/{kind}", {})
            opened = sum(v for k, v in conns.items() if k.endswith("connections"))
            detail = f"({ms[f'{side}/{kind}']:.0f} vs {floor:.0f} ms"
            detail += f"; {opened} new provider connections)" if conns else ")"
            report.add(
                Row(
                    "latency", f"{label}: {kind}, {side} / three-provider floor", round(ratio, 2), "x",
                    f"<= {goal}x" if goal else "", None if goal is None else ratio <= goal, detail, found,
                )
            )  # fmt: skip


def figure_latency(settings: Settings, report: Report, stack: Stack) -> None:
    for rtt in (0, settings.latency_rtt):
        label = f"rtt {rtt} ms" if rtt else "loopback"
        add_rows(measure(stack, settings.latency_runs, rtt, label.replace(" ", "")), label, report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--rtt", type=int, default=40)
    options = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    stack = Stack()
    stack.start()
    found: dict[str, Any] = {}
    try:
        for rtt in (0, options.rtt):
            label = f"rtt {rtt} ms" if rtt else "loopback"
            found[label] = measure(stack, options.runs, rtt, label.replace(" ", ""))
            add_rows(found[label], label, Report())
    finally:
        stack.stop()
    print(json.dumps({k: {"median_ms": v["median_ms"], "opened": v["opened"]} for k, v in found.items()}, indent=1))


if __name__ == "__main__":
    main()
