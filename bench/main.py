"""The benchmark behind ``scripts/bench``: the broker's speed against the local stack, as figures with goals.

Starts OpenBao (dev server), a moto server and the GitHub App emulator on
loopback (each in a process of its own), then measures, each figure as a
median over repeated runs, both sides of a ratio interleaved in the same run:

  cold        ``broker --version`` / ``--help`` (entry point and ``python -m broker.cli``) vs ``python -c pass``
  issue       ``broker issue --json`` of the stack task vs ``bench/floor.py issue`` (same provider calls)
  revoke      ``broker revoke --json`` of that session vs ``bench/floor.py revoke``
  concurrent  N processes at once, each ``issue`` then ``revoke``; failures; ``audit verify`` afterwards
  sweep       one ``broker sweep`` over N expired Vault sessions (seeded through the Python API)
  memory      peak RSS of ``broker issue`` (ru_maxrss of the child)
  audit       ``audit verify`` and ``audit lookup`` on a 1,000,000-record log (built once, cached)
  egress      the egress proxy: added latency over 1,000 requests, 64 CONNECT tunnels x 10 MiB
              (loopback and a 40 ms, 1 Gbit/s link; alternating rounds, CPU per party), its RSS
  dynamic     what one of each Vault dynamic kind adds to ``issue``, on loopback and at 40 ms per request
  daemon      ``broker serve``: thin-client cold start, issue/revoke vs the floor, 32 concurrent cycles, RSS
  fleetlog    a 1,000,000-record fleet chain COPYed into PostgreSQL: ``audit export`` + ``audit verify`` of it
  latency     the stack task through the daemon and the direct CLI vs the three-provider floor, on
              loopback and with every provider behind a 40 ms RTT proxy (bench/serving/stack_rtt.py)
  fleet       3 hosts on one PostgreSQL store x N concurrent cycles; the store's cost per issue/revoke vs SQLite
  fleetrevoke a revoke on host B of host A's GitHub session, confirmed by A's daemon (p95 of B's command)
  operations  the operations check's decision per request, in process (REST, GraphQL, reviews, git push and fetch)
  terminated  through a terminated host: the operations decision's added latency per request (keep-alive,
              with vs without operations), 1,000 requests/s with every request logged (backlog, records,
              the log's cost per record), a 50 MiB git push through the proxy vs direct over a modelled
              40 ms, 1 Gbit/s link and on loopback
  mcp         operations.mcp: a 4 KiB tools/call's added latency through the proxy (with vs without the check),
              a 200-tool tools/list answer filtered (JSON and SSE, in process)
  evidence    a flood of refused requests through one session's proxy (2 pipelined tunnels): records/s and the
              log's growth with one record each, and past the session's evidence budget (summed per key and minute)
  metrics     a /metrics scrape with 10,000 live sessions in a real SQLite store; span() with tracing off and on
  awsproxy    SigV4 through the proxy: verify + re-sign added per small AWS request, the proxy's CPU per small
              request (terminated and re-signed), a 256 MiB put_object (aws-chunked) through the proxy vs direct
              on loopback and over the modelled link, the proxy's RSS
  longsession 8 simulated hours (1 h = 24 s) of 5 requests/s to GitHub and to Vault, each behind 40 ms, from
              ``broker exec`` in bubblewrap: failed requests, placeholders seen, renewals, every old token revoked
  approvals   through ``broker serve``: approve-to-session, a child session against an issue, 100 pending listed
  gateway     ``broker serve``'s gateway: RSS holding 1,000 live sessions, the latency and CPU it adds per keep-alive
              request through a terminated host (against the per-session proxy and direct), 100 sessions at once
  oauthrefresh  20 broker processes sharing one OAuth refresh token, all renewing at each expiry against a rotating
              authorisation server: races, reuse detections, refreshes per expiry (and the same without the host's
              lock, rounds alternating)
  containers  ``broker exec`` start to the command's first output, ``--sandbox podman`` vs ``bwrap``, alternating
              (bench/commands/container_start.py: its own OpenBao and image)
  identity    a session token (file key, Vault transit), aws_sts via web identity vs its access key, JWKS and
              discovery answers per second (bench/serving/identity.py)

The fleet figure starts a PostgreSQL of its own beside the stack (bench/fleets/fleet.py);
egress, dynamic, daemon, terminated, evidence, awsproxy and longsession start what they
need themselves (bench/proxy/egress.py, bench/commands/vault_dynamic.py,
bench/serving/daemon.py, bench/proxy/terminated.py with bench/proxy/gitpush.py and
bench/proxy/proxychild.py, bench/proxy/mcp.py, bench/proxy/evidence_flood.py, bench/proxy/aws_resign.py with
bench/proxy/aws_sides.py,
bench/proxy/longsession.py with bench/proxy/sandbox_client.py; each also runs alone with ``python -m``). The figures
live in rooms: ``commands`` (the broker's commands as processes), ``serving`` (``broker
serve``), ``fleets`` (PostgreSQL), ``proxy`` (the egress proxy).

Prints a table and writes ``bench-results/bench-<git short sha>.json`` and
``bench-results/latest.json``. ``--quick`` for a smoke run, ``--only a,b``
for some figures. Everything the broker touches lives in
``bench-results/work/`` and is unmounted and removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import shutil
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench.commands.audit import figure_audit
from bench.commands.cold import figure_cold
from bench.commands.concurrency import figure_concurrent
from bench.commands.container_start import figure_containers
from bench.commands.cycles import figure_cycles
from bench.commands.memory import figure_memory
from bench.commands.oauth_refresh import figure_oauth_refresh
from bench.commands.sweep import figure_sweep
from bench.commands.vault_dynamic import figure_dynamic
from bench.common import (
    BROKER,
    FIGURES,
    FLOOR,
    NEEDS_STACK,
    PYTHON,
    RESULTS,
    ROOT,
    WORK,
    Report,
    Settings,
    cpu_busy,
    git,
)
from bench.fleets.fleet import figure_fleet
from bench.fleets.fleet_log import figure_fleet_log
from bench.fleets.fleet_revoke import figure_fleet_revoke
from bench.local import BrokerSetup, Stack, base_env, floor_params, unmount_under
from bench.proxy.aws_resign import figure_awsproxy
from bench.proxy.egress import figure_egress
from bench.proxy.evidence_flood import figure_evidence
from bench.proxy.longsession import figure_longsession
from bench.proxy.mcp import figure_mcp
from bench.proxy.operations import figure_operations
from bench.proxy.rotation import figure_rotation
from bench.proxy.terminated import figure_terminated
from bench.serving.approvals import figure_approvals
from bench.serving.daemon import figure_daemon
from bench.serving.gateway import figure_gateway
from bench.serving.identity import figure_identity
from bench.serving.metrics import figure_metrics
from bench.serving.stack_rtt import figure_latency

# -- main ----------------------------------------------------------------------------------


def print_table(report: Report) -> str:
    header = ("figure", "value", "goal", "result")
    rows = [
        (r.name, r.shown_value(), r.goal or "-", "-" if r.ok is None else ("pass" if r.ok else "MISS"))
        for r in report.rows
    ]
    rows += [(f"{name}: ERROR", message[:60], "-", "ERROR") for name, message in report.errors.items()]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(4)]
    lines = ["  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    text = "\n".join(lines)
    print("\n" + text)
    return text


def product_state() -> tuple[str, str]:
    """(short sha of HEAD, a digest of uncommitted product changes or "")."""
    sha = git("rev-parse", "--short", "HEAD") or "nogit"
    diff = git("diff", "HEAD", "--", "broker", "providers", "pyproject.toml")
    return sha, hashlib.sha256(diff.encode()).hexdigest()[:16] if diff else ""


def write_results(
    report: Report, settings: Settings, selected: list[str], started: float, at_start: tuple[str, str]
) -> Path:
    sha, diff = at_start
    at_end = product_state()
    if at_end != at_start:
        report.notes.append(f"the product code changed during the run: {at_start} -> {at_end}")
        print(f"bench: note: the product code changed during the run ({at_start} -> {at_end})")
    document = {
        "meta": {
            "git_sha": sha,
            "product_dirty": bool(diff),
            "product_diff_sha256": diff,
            "at_end": {"git_sha": at_end[0], "product_diff_sha256": at_end[1]},
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "seconds": round(time.perf_counter() - started, 1),
            "loadavg_at_start": report.load_at_start,
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
            "machine": f"{platform.machine()} {os.cpu_count()} cpus",
            "quick": settings.quick,
            "figures": selected,
            "settings": settings.__dict__,
        },
        "figures": [
            {
                "figure": r.figure,
                "name": r.name,
                "value": r.value,
                "unit": r.unit,
                "goal": r.goal,
                "pass": r.ok,
                "detail": r.detail,
                "data": r.data,
            }
            for r in report.rows
        ],
        "errors": report.errors,
        "background_cpu_busy": report.background,
        "notes": report.notes,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"bench-{sha}{'-quick' if settings.quick else ''}.json"
    text = json.dumps(document, indent=1, default=str) + "\n"
    path.write_text(text)
    (RESULTS / "latest.json").write_text(text)
    return path


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, smaller counts (a smoke run)")
    parser.add_argument("--only", default="", help=f"comma-separated figures: {','.join(FIGURES)}")
    parser.add_argument("--reps", type=int, help="issue/revoke repetitions (default 9, quick 3)")
    parser.add_argument("--cold-reps", type=int, help="cold start repetitions (default 21, quick 5)")
    parser.add_argument(
        "--concurrency", type=int, help="concurrent cycles, also through the daemon (default 32, quick 8)"
    )
    parser.add_argument("--concurrent-runs", type=int, help="runs of the concurrent figure (default 5, quick 1)")
    parser.add_argument("--sweep-sessions", type=int, help="expired sessions to sweep (default 1000, quick 100)")
    parser.add_argument("--sweep-reps", type=int, help="sweep repetitions (default 5, quick 1)")
    parser.add_argument("--seed-processes", type=int, help="parallel seeding processes for sweep (default 4)")
    parser.add_argument("--memory-reps", type=int, help="peak-RSS repetitions (default 7, quick 3)")
    parser.add_argument("--audit-records", type=int, help="issuance log size (default 1,000,000, quick 100,000)")
    parser.add_argument(
        "--audit-checkpoint-every",
        type=int,
        default=0,
        help="records between checkpoints (default 0: one per command, as a real log has)",
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="start the stack, write a broker config and the floor's parameters, print them, wait for Ctrl-C"
        " (for profiling by hand)",
    )
    parser.add_argument("--audit-reps", type=int, help="verify/lookup repetitions (default 5, quick 3)")
    parser.add_argument("--egress-requests", type=int, help="requests each way for egress (default 1000, quick 100)")
    parser.add_argument("--egress-tunnels", type=int, help="concurrent CONNECT tunnels (default 64, quick 8)")
    parser.add_argument("--egress-mib", type=int, help="MiB sent through each tunnel (default 10, quick 2)")
    parser.add_argument("--egress-rounds", type=int, help="alternating tunnel rounds (default 5, quick 2)")
    parser.add_argument("--dynamic-runs", type=int, help="issues of each session kind (default 15, quick 3)")
    parser.add_argument("--dynamic-rtt", type=int, default=40, help="ms added to each Vault request (default 40)")
    parser.add_argument("--daemon-runs", type=int, help="daemon issue/revoke repetitions (default 15, quick 3)")
    parser.add_argument(
        "--daemon-cycles", type=int, help="cycles before the daemon's second RSS reading (default 1000, quick 100)"
    )
    parser.add_argument("--latency-runs", type=int, help="latency figure repetitions (default 9, quick 3)")
    parser.add_argument("--latency-rtt", type=int, default=40, help="ms RTT of the latency figure's proxies")
    parser.add_argument("--fleet-reps", type=int, help="alternating SQLite/PostgreSQL cycles (default 21, quick 5)")
    args = parser.parse_args(argv)
    selected = [name.strip() for name in args.only.split(",") if name.strip()] or list(FIGURES)
    unknown = [name for name in selected if name not in FIGURES]
    if unknown:
        parser.error(f"--only: unknown figure(s) {', '.join(unknown)} (known: {', '.join(FIGURES)})")
    args.selected = [name for name in FIGURES if name in selected]
    return args


@contextlib.contextmanager
def workspace() -> Iterator[None]:
    RESULTS.mkdir(exist_ok=True)
    unmount_under(WORK)
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(mode=0o700)
    try:
        yield
    finally:
        unmount_under(WORK)
        shutil.rmtree(WORK, ignore_errors=True)


def serve() -> int:
    """Keep the stack up with one broker installation, for profiling ``broker issue`` and friends by hand."""
    with workspace():
        stack = Stack()
        stack.start()
        try:
            setup = BrokerSetup("serve", stack).create()
            params = floor_params(stack, Path("/dev/shm"), setup)
            env = base_env()
            (WORK / "env.sh").write_text("".join(f"export {k}={json.dumps(v)}\n" for k, v in env.items()))
            print(f"stack up. config {setup.config}, task {setup.task}, floor params {params}")
            print(f"environment: source {WORK / 'env.sh'}")
            print(f"  {BROKER} --config {setup.config} issue --task {setup.task} --json")
            print(f"  {PYTHON} {FLOOR} issue {params}")
            print("Ctrl-C (or SIGTERM) stops the stack and removes bench-results/work/", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
        finally:
            stack.stop()
    return 0


def need(stack: Stack | None) -> Stack:
    assert stack is not None
    return stack


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # clean up the stack and the mounts on SIGTERM too


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    settings = Settings.from_args(args)
    selected: list[str] = args.selected
    if os.geteuid() != 0 and NEEDS_STACK & set(selected):
        print("bench: note: not root; the broker cannot mount a tmpfs per session (run as root for real figures)")
    started = time.perf_counter()
    at_start = product_state()
    load = os.getloadavg()[0]
    if load > 0.5 * (os.cpu_count() or 1):
        print(f"bench: note: load average {load:.1f} on {os.cpu_count()} cpus; other work will skew the figures")
    report = Report()
    signal.signal(signal.SIGTERM, _interrupt)
    if args.serve:
        return serve()
    with workspace():
        stack: Stack | None = None
        try:
            if NEEDS_STACK & set(selected):
                print("== starting the local stack (OpenBao dev, moto server, GitHub App emulator)", flush=True)
                stack = Stack()
                stack.start()
            steps: list[tuple[str, Callable[[], None]]] = []
            if "cold" in selected:
                steps.append(("cold", lambda: figure_cold(settings, report)))
            wanted_cycles = {"issue", "revoke"} & set(selected)
            if wanted_cycles:
                assert stack is not None
                steps.append(("issue/revoke", lambda: figure_cycles(settings, report, stack, wanted_cycles)))
            if "concurrent" in selected:
                steps.append(("concurrent", lambda: figure_concurrent(settings, report, need(stack))))
            if "sweep" in selected:
                steps.append(("sweep", lambda: figure_sweep(settings, report, need(stack))))
            if "memory" in selected:
                steps.append(("memory", lambda: figure_memory(settings, report, need(stack))))
            if "audit" in selected:
                steps.append(("audit", lambda: figure_audit(settings, report)))
            if "fleetlog" in selected:
                steps.append(("fleetlog", lambda: figure_fleet_log(settings, report)))
            if "egress" in selected:
                steps.append(("egress", lambda: figure_egress(settings, report)))
            if "dynamic" in selected:
                steps.append(("dynamic", lambda: figure_dynamic(settings, report)))
            if "daemon" in selected:
                steps.append(("daemon", lambda: figure_daemon(settings, report)))
            if "approvals" in selected:
                steps.append(("approvals", lambda: figure_approvals(settings, report)))
            if "containers" in selected:
                steps.append(("containers", lambda: figure_containers(settings, report)))
            if "latency" in selected:
                steps.append(("latency", lambda: figure_latency(settings, report, need(stack))))
            if "fleet" in selected:
                steps.append(("fleet", lambda: figure_fleet(settings, report, need(stack))))
            if "fleetrevoke" in selected:
                steps.append(("fleetrevoke", lambda: figure_fleet_revoke(settings, report, need(stack))))
            if "operations" in selected:
                steps.append(("operations", lambda: figure_operations(settings, report)))
            if "terminated" in selected:
                steps.append(("terminated", lambda: figure_terminated(settings, report)))
            if "mcp" in selected:
                steps.append(("mcp", lambda: figure_mcp(settings, report)))
            if "evidence" in selected:
                steps.append(("evidence", lambda: figure_evidence(settings, report)))
            if "rotation" in selected:
                steps.append(("rotation", lambda: figure_rotation(settings, report)))
            if "longsession" in selected:
                steps.append(("longsession", lambda: figure_longsession(settings, report)))
            if "metrics" in selected:
                steps.append(("metrics", lambda: figure_metrics(settings, report)))
            if "oauthrefresh" in selected:
                steps.append(("oauthrefresh", lambda: figure_oauth_refresh(settings, report)))
            if "identity" in selected:
                steps.append(("identity", lambda: figure_identity(settings, report)))
            if "awsproxy" in selected:
                steps.append(("awsproxy", lambda: figure_awsproxy(settings, report)))
            if "gateway" in selected:
                steps.append(("gateway", lambda: figure_gateway(settings, report)))
            for name, step in steps:
                background = cpu_busy()
                report.background[name] = round(background, 2)
                print(f"== {name} (CPU busy with other work just before: {background:.0%})", flush=True)
                step_start = time.perf_counter()
                try:
                    step()
                except Exception as exc:  # one broken figure must not cost the others
                    report.errors[name] = f"{type(exc).__name__}: {exc}"
                    print(f"  !! {name} failed: {type(exc).__name__}: {exc}", flush=True)
                print(f"   ({name} took {time.perf_counter() - step_start:.1f} s)", flush=True)
        finally:
            if stack is not None:
                stack.stop()
    print_table(report)
    path = write_results(report, settings, selected, started, at_start)
    print(f"\nresults: {path.relative_to(ROOT)} (and bench-results/latest.json)")
    return 1 if report.errors else 0
