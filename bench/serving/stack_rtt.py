"""The latency figure: the stack task through the daemon and the direct CLI against the three-provider floor.

Part of ``scripts/bench`` (``--only latency``), or alone with the stack it starts
itself (``python -m bench.serving.stack_rtt [--runs 9] [--rtt 40]``). Twice: on loopback
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

from bench.commands.aws_round_trips import BUYS as AWS_BUYS
from bench.common import BROKER, FLOOR, PYTHON, WORK, Report, Row, Settings, median, must, run
from bench.local import BrokerSetup, Stack, Urls, base_env, floor_params, stack_urls
from bench.serving.daemon import http, wait
from tests.fixtures.latencyproxy import LatencyProxy, latency_proxy
from tests.fixtures.slowproxy import SlowProxy, slow_proxy

SIDES = ("floor", "thin client", "direct CLI", "daemon answer")
HANDSHAKE_RTTS = 2.0  # TCP + TLS 1.3


def port(url: str) -> int:
    found = urlsplit(url).port
    assert found is not None
    return found


#: What each call the broker keeps buys (the floor makes its calls because a script would); AWS:
#: bench.commands.aws_round_trips.
BUYS = {
    "issue": {
        "vault POST /v1/auth/token/create/<role>": "the token (orphan, exact policies, capped ttl and uses)",
        "vault POST /v1/auth/token/lookup-accessor": "the token has no entity and no identity policies (else revoked)",
        "github GET /repos/<owner>/<repo>/installation": "the installation id (cached in a warm daemon)",
        "github POST /app/installations/<id>/access_tokens": "the token, narrowed to the repositories and permissions",
        **{f"aws {call}": buys for call, buys in AWS_BUYS["issue"].items()},
    },
    "revoke": {
        "vault POST /v1/auth/token/revoke-accessor": "the token is dead",
        "github DELETE /installation/token": "the token is dead",
        **{f"aws {call}": buys for call, buys in AWS_BUYS["revoke"].items()},
    },
}


class Meter:
    """Connections and requests at each provider's proxy (nothing without proxies)."""

    def __init__(self, vault: SlowProxy | None = None, aws: LatencyProxy | None = None,
                 github: SlowProxy | None = None) -> None:  # fmt: skip
        self.vault, self.aws, self.github = vault, aws, github

    def counts(self) -> dict[str, int]:
        if self.vault is None or self.aws is None or self.github is None:
            return {}
        return {
            "vault_connections": self.vault.connections,
            "vault_requests": self.vault.requests,
            "aws_connections": self.aws.connections,
            "aws_requests": len(self.aws.actions),
            "github_connections": self.github.connections,
            "github_requests": self.github.requests,
        }

    def calls(self, before: dict[str, int]) -> list[str]:
        """The calls since ``before`` (a ``counts()``), by provider, each provider's in order."""
        if self.vault is None or self.aws is None or self.github is None:
            return []
        return (
            [f"vault {line}" for line in self.vault.lines[before["vault_requests"] :]]
            + [f"aws {action}" for action in self.aws.calls(before["aws_requests"])]
            + [f"github {line}" for line in self.github.lines[before["github_requests"] :]]
        )


@contextlib.contextmanager
def proxies(stack: Stack, rtt_ms: float) -> Iterator[tuple[Urls, Meter]]:
    """The providers' URLs (behind latency proxies when ``rtt_ms``) and their meter."""
    if not rtt_ms:
        yield stack_urls(stack), Meter()
        return
    rtt = rtt_ms / 1000
    base = stack_urls(stack)
    with (
        slow_proxy(port(base.vault), rtt, every_request=True, handshake=HANDSHAKE_RTTS * rtt) as vault,
        latency_proxy(port(base.aws), rtt, HANDSHAKE_RTTS * rtt) as aws,
        slow_proxy(port(base.github), rtt, every_request=True, handshake=HANDSHAKE_RTTS * rtt) as github,
    ):
        yield Urls(vault.addr, aws.addr, github.addr), Meter(vault, aws, github)


def measure(stack: Stack, runs: int, rtt_ms: float, label: str) -> dict[str, Any]:
    """Median ms of each side's issue and revoke, and the connections and requests of their last run."""
    env = base_env()
    samples: dict[str, list[float]] = {f"{side}/{kind}": [] for side in SIDES for kind in ("issue", "revoke")}
    opened: dict[str, dict[str, int]] = {}
    calls: dict[str, list[str]] = {}
    with proxies(stack, rtt_ms) as (urls, meter):
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
            before = meter.counts()
            started = time.perf_counter()
            out = action()
            if record:
                samples[f"{side}/{kind}"].append(time.perf_counter() - started)
                after = meter.counts()
                opened[f"{side}/{kind}"] = {k: after[k] - before[k] for k in after}
                calls[f"{side}/{kind}"] = meter.calls(before)
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
                raise RuntimeError(f"bench.serving.stack_rtt: {side} revoke of {session}: {report}")

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
                    raise RuntimeError(f"bench.serving.stack_rtt: the daemon answered {status}: {document}")
                return str(document["session"])

            def revoke(session: str) -> str:
                status, document = http(sock, "DELETE", f"/v1/sessions/{session}")
                if status != 200:
                    raise RuntimeError(f"bench.serving.stack_rtt: the daemon revoke answered {status}: {document}")
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
    return {"rtt_ms": rtt_ms, "runs": runs, "median_ms": medians, "opened": opened, "calls": calls,
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


def print_profile(found: dict[str, Any]) -> None:
    """Each side's calls in its last run at latency, and what each call of the broker's buys."""
    for kind in ("issue", "revoke"):
        for side in ("floor", "direct CLI"):
            conns = found["opened"].get(f"{side}/{kind}", {})
            opened = ", ".join(f"{k.split('_')[0]} {v}" for k, v in conns.items() if k.endswith("connections"))
            print(f"     {kind} {side}: new connections {opened}")
            for call in found["calls"].get(f"{side}/{kind}", []):
                buys = "" if side == "floor" else BUYS[kind].get(_generic(call), "")
                print(f"       {call}" + (f"  -- buys: {buys}" if buys else ""))


def _generic(call: str) -> str:
    """A call's key in ``BUYS``: its path's names replaced by placeholders."""
    parts = call.split()
    if parts[0] == "vault" and "/token/create/" in parts[-1]:
        return "vault POST /v1/auth/token/create/<role>"
    if parts[0] == "github" and parts[-1].endswith("/installation") and parts[-1].startswith("/repos/"):
        return "github GET /repos/<owner>/<repo>/installation"
    if parts[0] == "github" and parts[-1].endswith("/access_tokens"):
        return "github POST /app/installations/<id>/access_tokens"
    return call


def figure_latency(settings: Settings, report: Report, stack: Stack) -> None:
    for rtt in (0, settings.latency_rtt):
        label = f"rtt {rtt} ms" if rtt else "loopback"
        found = measure(stack, settings.latency_runs, rtt, label.replace(" ", ""))
        add_rows(found, label, report)
        if rtt:
            print_profile(found)


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
            if rtt:
                print_profile(found[label])
    finally:
        stack.stop()
    print(json.dumps({k: {"median_ms": v["median_ms"], "opened": v["opened"]} for k, v in found.items()}, indent=1))


if __name__ == "__main__":
    main()
