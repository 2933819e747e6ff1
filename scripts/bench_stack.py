"""The benchmark behind ``scripts/bench``: the broker's speed against the local stack, as figures with goals.

Starts OpenBao (dev server), a moto server and the GitHub App emulator on
loopback (each in a process of its own), then measures, each figure as a
median over repeated runs, both sides of a ratio interleaved in the same run:

  cold        ``broker --version`` / ``--help`` (entry point and ``python -m broker.cli``) vs ``python -c pass``
  issue       ``broker issue --json`` of the stack task vs ``scripts/bench_floor.py issue`` (same provider calls)
  revoke      ``broker revoke --json`` of that session vs ``scripts/bench_floor.py revoke``
  concurrent  N processes at once, each ``issue`` then ``revoke``; failures; ``audit verify`` afterwards
  sweep       one ``broker sweep`` over N expired Vault sessions (seeded through the Python API)
  memory      peak RSS of ``broker issue`` (ru_maxrss of the child)
  audit       ``audit verify`` and ``audit lookup`` on a 1,000,000-record log (built once, cached)

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
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_audit import figure_audit  # noqa: E402
from bench_common import (  # noqa: E402
    BROKER,
    FIGURES,
    FLOOR,
    NEEDS_STACK,
    PYTHON,
    RESULTS,
    SEED,
    SWEEP_TASK,
    WORK,
    Report,
    Row,
    Settings,
    children_cpu,
    cpu_busy,
    git,
    median,
    must,
    peak_rss_kib,
    run,
    summary,
)
from bench_local import BrokerSetup, Stack, base_env, floor_params, unmount_under  # noqa: E402

# -- figures -------------------------------------------------------------------------------


def figure_cold(settings: Settings, report: Report) -> None:
    env = base_env()
    variants = {
        "python -c pass": [PYTHON, "-c", "pass"],
        "broker --version": [BROKER, "--version"],
        "broker --help": [BROKER, "--help"],
        "python -m broker.cli --version": [PYTHON, "-m", "broker.cli", "--version"],
        "python -m broker.cli --help": [PYTHON, "-m", "broker.cli", "--help"],
    }
    for cmd in variants.values():  # warm the page cache and the bytecode caches
        for _ in range(2):
            must(run(cmd, env=env), " ".join(cmd[-2:]))
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for _ in range(settings.cold_reps):
        random.shuffle(names)
        for name in names:
            samples[name].append(must(run(variants[name], env=env), name).seconds)
    base = median(samples["python -c pass"])
    for name in variants:
        if name == "python -c pass":
            continue
        value = median(samples[name])
        ratio = value / base
        report.add(
            Row(
                "cold",
                f"cold: {name} / python -c pass",
                round(ratio, 2),
                "x",
                "<= 3x",
                ratio <= 3,
                f"({value * 1000:.0f} ms vs {base * 1000:.0f} ms)",
                {"ratio": ratio, "broker": summary(samples[name]), "baseline": summary(samples["python -c pass"])},
            )
        )


def figure_cycles(settings: Settings, report: Report, stack: Stack, wanted: set[str]) -> None:
    """Figures 2 and 3: issue and revoke, broker vs floor, interleaved in the same run."""
    env = base_env()
    setup = BrokerSetup("cycle", stack).create()
    floor_dir = Path("/dev/shm") / f"broker-bench-floor-{os.getpid()}"
    floor_dir.mkdir(mode=0o711, exist_ok=True)
    params = floor_params(stack, floor_dir, setup)
    kinds = ("broker_issue", "broker_revoke", "floor_issue", "floor_revoke")
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}

    def broker_cycle(record: bool) -> None:
        stack.reset_deny()
        ran, session = setup.issue(env)
        if not session:
            raise RuntimeError(f"broker issue failed: {ran.first_error()}")
        revoked, problem = setup.revoke(session, env)
        if problem:
            raise RuntimeError(f"broker revoke of {session}: {problem}")
        if record:
            samples["broker_issue"].append(ran.seconds)
            samples["broker_revoke"].append(revoked.seconds)
            cpu["broker_issue"].append(ran.cpu)
            cpu["broker_revoke"].append(revoked.cpu)

    def floor_cycle(record: bool) -> None:
        stack.reset_deny()
        ran = must(run([PYTHON, FLOOR, "issue", str(params)], env=env), "floor issue")
        directory = ran.stdout.decode().strip()
        revoked = must(run([PYTHON, FLOOR, "revoke", str(params), directory], env=env), "floor revoke")
        if record:
            samples["floor_issue"].append(ran.seconds)
            samples["floor_revoke"].append(revoked.seconds)
            cpu["floor_issue"].append(ran.cpu)
            cpu["floor_revoke"].append(revoked.cpu)

    try:
        broker_cycle(False)  # warm-up: audit key, store, keepsafe mount, bytecode caches
        floor_cycle(False)
        for rep in range(settings.cycle_reps):
            pair: list[Callable[[bool], None]] = [broker_cycle, floor_cycle]
            for cycle in pair if rep % 2 == 0 else reversed(pair):
                cycle(True)
    finally:
        shutil.rmtree(floor_dir, ignore_errors=True)
    for kind, label in (("issue", "broker issue --json / floor issue"), ("revoke", "broker revoke / floor revoke")):
        if kind not in wanted:
            continue
        ours, floor = median(samples[f"broker_{kind}"]), median(samples[f"floor_{kind}"])
        ratio = ours / floor
        report.add(
            Row(
                kind,
                f"{kind}: {label}",
                round(ratio, 2),
                "x",
                "<= 0.8x",
                ratio <= 0.8,
                f"({ours * 1000:.0f} ms vs {floor * 1000:.0f} ms wall; CPU"
                f" {median(cpu[f'broker_{kind}']) * 1000:.0f} ms vs {median(cpu[f'floor_{kind}']) * 1000:.0f} ms)",
                {
                    "ratio": ratio,
                    "broker": summary(samples[f"broker_{kind}"]),
                    "floor": summary(samples[f"floor_{kind}"]),
                    "broker_cpu": summary(cpu[f"broker_{kind}"]),
                    "floor_cpu": summary(cpu[f"floor_{kind}"]),
                },
            )
        )


def figure_concurrent(settings: Settings, report: Report, stack: Stack) -> None:
    env = base_env()
    runs: list[dict[str, Any]] = []
    for _ in range(settings.concurrent_runs):
        setup = BrokerSetup("concurrent", stack).create()
        stack.reset_deny()
        ran, session = setup.issue(env)  # warm-up: audit key, store schema, keepsafe mount
        if not session or setup.revoke(session, env)[1]:
            raise RuntimeError(f"warm-up cycle failed: {ran.first_error()}")
        stack.reset_deny()
        runs.append(_concurrent_run(setup, settings.concurrency, env, stack))
    totals = [r["total_seconds"] for r in runs]
    slowest = [r["slowest_cycle_seconds"] for r in runs]
    failures = sum(r["failures"] for r in runs)
    verified = all(r["audit_verify_ok"] for r in runs)
    live_left = sum(r["live_sessions_left"] for r in runs)
    n = settings.concurrency
    data = {"runs": runs, "total": summary(totals), "slowest": summary(slowest)}
    report.add(
        Row(
            "concurrent",
            f"concurrent: {n} issue+revoke cycles, total",
            round(median(totals), 2),
            "s",
            "",
            None,
            f"(median of {len(runs)} runs; {', '.join(f'{t:.1f}' for t in totals)})",
            data,
        )
    )
    report.add(
        Row(
            "concurrent",
            "concurrent: slowest cycle",
            round(median(slowest), 2),
            "s",
            "",
            None,
            f"(median of {len(runs)}; median cycle {median([median(r['cycle_seconds']) for r in runs]):.1f} s)",
        )
    )
    reasons = sorted({reason for r in runs for reason in r["failure_reasons"]})
    ok_cycles = [n - r["failures"] for r in runs]
    denied = [r["deny_userids"] for r in runs]
    report.add(
        Row(
            "concurrent",
            "concurrent: revoked AWS sessions found in the deny policy",
            f"{sum(denied)}/{sum(ok_cycles)}",
            "",
            "all",
            denied == ok_cycles,
            "(lost read-modify-write updates would leave revoked sessions usable)",
        )
    )
    cpu_total = [r["broker_cpu_seconds"] for r in runs]
    report.add(
        Row(
            "concurrent",
            "concurrent: broker CPU per cycle",
            round(median(cpu_total) / n, 2),
            "s",
            "",
            None,
            f"({median(cpu_total):.0f} CPU s per run on {os.cpu_count()} cpus;"
            f" servers {runs[-1]['servers_cpu_seconds']})",
        )
    )
    report.add(
        Row(
            "concurrent",
            "concurrent: failed cycles",
            failures,
            f"of {n * len(runs)}",
            "0",
            failures == 0,
            ("; ".join(reasons))[:400],
            {"reasons": reasons, "live_sessions_left": live_left},
        )
    )
    report.add(
        Row(
            "concurrent",
            "concurrent: audit verify afterwards",
            "pass" if verified else "FAIL",
            "",
            "pass",
            verified,
            f"(live sessions left: {live_left})",
        )
    )


def _concurrent_run(setup: BrokerSetup, n: int, env: dict[str, str], stack: Stack) -> dict[str, Any]:
    barrier = threading.Barrier(n)
    cycles: list[dict[str, Any]] = [{} for _ in range(n)]

    def cycle(index: int) -> None:
        barrier.wait()
        start = time.perf_counter()
        result: dict[str, Any] = {"ok": False}
        try:
            ran, session = setup.issue(env)
            result["issue_seconds"] = ran.seconds
            if not session:
                result["error"] = f"issue exit {ran.code}: {ran.first_error()}"
                return
            revoked, problem = setup.revoke(session, env)
            result["revoke_seconds"] = revoked.seconds
            if problem:
                result["error"] = f"revoke exit {revoked.code}: {problem}"
                return
            result["ok"] = True
        finally:
            result["seconds"] = time.perf_counter() - start
            cycles[index] = result

    threads = [threading.Thread(target=cycle, args=(i,)) for i in range(n)]
    servers_before = stack.server_cpu()
    cpu_before = children_cpu()
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = time.perf_counter() - start
    broker_cpu = children_cpu() - cpu_before
    servers_cpu = {name: round(v - servers_before.get(name, 0.0), 2) for name, v in stack.server_cpu().items()}
    verify = run(setup.cmd("audit", "verify"), env=env)
    status = run(setup.cmd("status", "--json"), env=env)
    try:
        live = len(json.loads(status.stdout))
    except ValueError:
        live = -1
    failures = [c for c in cycles if not c.get("ok")]
    result = {
        "total_seconds": round(total, 3),
        "slowest_cycle_seconds": round(max(c["seconds"] for c in cycles), 3),
        "cycle_seconds": [round(c["seconds"], 3) for c in cycles],
        "issue_seconds": summary([c["issue_seconds"] for c in cycles if "issue_seconds" in c]),
        "revoke_seconds": summary([c["revoke_seconds"] for c in cycles if "revoke_seconds" in c]),
        "failures": len(failures),
        "failure_reasons": sorted({c.get("error", "?") for c in failures}),
        "audit_verify_ok": verify.code == 0,
        "audit_verify_output": (verify.stdout or verify.stderr).decode(errors="replace").strip()[:300],
        "live_sessions_left": live,
        "deny_policy_chars": stack.deny_policy_size(),
        "deny_userids": stack.denied_userids(),
        "broker_cpu_seconds": round(broker_cpu, 2),
        "servers_cpu_seconds": servers_cpu,
    }
    print(
        f"     run: total {total:.1f} s, slowest {result['slowest_cycle_seconds']:.1f} s, failures {len(failures)},"
        f" verify {'ok' if verify.code == 0 else 'FAIL'}, live left {live}, AWS sessions in the deny policy"
        f" {result['deny_userids']}; broker CPU {broker_cpu:.1f} s, servers CPU {servers_cpu}; issue median"
        f" {result['issue_seconds']['median']:.1f} s, revoke median {result['revoke_seconds']['median']:.1f} s",
        flush=True,
    )
    return result


def figure_sweep(settings: Settings, report: Report, stack: Stack) -> None:
    env = base_env()
    n = settings.sweep_sessions
    reps: list[dict[str, Any]] = []
    for _ in range(settings.sweep_reps):
        setup = BrokerSetup("sweep", stack).create(SWEEP_TASK)
        started = time.perf_counter()
        rest = n - 1  # one more comes from the warm-up below
        per = [
            rest // settings.seed_processes + (1 if i < rest % settings.seed_processes else 0)
            for i in range(settings.seed_processes)
        ]
        must(run([PYTHON, SEED, str(setup.config), str(setup.task), "1"], env=env), "seed warm-up")  # key, store
        seeders = [
            subprocess.Popen(
                [PYTHON, SEED, str(setup.config), str(setup.task), str(count)],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for count in per
            if count
        ]
        issued = 0
        seed_errors: dict[str, int] = {}
        for seeder in seeders:
            out, err = seeder.communicate(timeout=1800)
            try:
                seeded = json.loads(out)
            except ValueError:
                raise RuntimeError(
                    f"seeding failed: {err.decode(errors='replace').strip().splitlines()[-1:]}"
                ) from None
            issued += seeded["issued"]
            for message, count in seeded["errors"].items():
                seed_errors[message] = seed_errors.get(message, 0) + count
        created = time.perf_counter() - started
        time.sleep(4.0)  # every session (ttl 3s) and its Vault token are past expiry now
        waited = time.perf_counter() - started - created
        ran = run(setup.cmd("sweep", "--json"), env=env, timeout=1800)
        try:
            outcome = json.loads(ran.stdout)
        except ValueError:
            outcome = {}
        expired = len(outcome.get("expired", []))
        pending = len(outcome.get("pending", []))
        reps.append(
            {
                "sessions": issued + 1,
                "seed_errors": seed_errors,
                "create_seconds": round(created, 3),
                "wait_seconds": round(waited, 3),
                "sweep_seconds": round(ran.seconds, 3),
                "exit": ran.code,
                "expired": expired,
                "pending": pending,
                "error": ran.first_error() if ran.code else "",
            }
        )
        print(
            f"     rep: created {issued + 1} sessions in {created:.1f} s (+{waited:.1f} s wait;"
            f" {sum(seed_errors.values())} refused and retried), sweep"
            f" {ran.seconds:.2f} s, expired {expired}, pending {pending}, exit {ran.code}",
            flush=True,
        )
        unmount_under(setup.dir)
    sweeps = [r["sweep_seconds"] for r in reps]
    value = median(sweeps)
    ok = all(r["exit"] == 0 and r["expired"] == r["sessions"] for r in reps)
    creation = sum(r["create_seconds"] for r in reps)
    report.add(
        Row(
            "sweep",
            f"sweep: {n} expired Vault sessions",
            round(value, 2),
            "s",
            "<= 20 s",
            value <= 20 and ok,
            f"(median of {len(reps)}; all expired: {ok}; seeding {creation:.0f} s in total, "
            f"{settings.seed_processes} processes via the Python API)",
            {"reps": reps, "sweep": summary(sweeps)},
        )
    )


def figure_memory(settings: Settings, report: Report, stack: Stack) -> None:
    env = base_env()
    setup = BrokerSetup("memory", stack).create()
    out = WORK / "maxrss"
    floor_dir = Path("/dev/shm") / f"broker-bench-floor-mem-{os.getpid()}"
    floor_dir.mkdir(mode=0o711, exist_ok=True)
    params = floor_params(stack, floor_dir, setup)
    ours: list[int] = []
    floor: list[int] = []
    bare: list[int] = []
    issue_cmd = setup.cmd("issue", "--task", str(setup.task), "--json", "--session-file", str(WORK / "mem-session"))
    try:
        must(setup.issue(env)[0], "warm-up issue")
        for _ in range(settings.memory_reps):
            stack.reset_deny()
            kib, code = peak_rss_kib(issue_cmd, env=env, out=out)
            if code != 0:
                raise RuntimeError(f"broker issue exited {code}")
            ours.append(kib)
            setup.revoke((WORK / "mem-session").read_text().strip(), env)
            kib, code = peak_rss_kib([PYTHON, FLOOR, "issue", str(params)], env=env, out=out)
            floor.append(kib)
            bare.append(peak_rss_kib([PYTHON, "-c", "pass"], env=env, out=out)[0])
    finally:
        for child in floor_dir.iterdir() if floor_dir.exists() else []:
            for root, dirs, _ in os.walk(child):
                for name in dirs:
                    os.chmod(os.path.join(root, name), 0o700)
            os.chmod(child, 0o700)
        shutil.rmtree(floor_dir, ignore_errors=True)
    value = median(ours) / 1024
    report.add(
        Row(
            "memory",
            "memory: broker issue peak RSS",
            round(value, 1),
            "MiB",
            "<= 80 MiB",
            value <= 80,
            f"(floor {median(floor) / 1024:.1f} MiB, python -c pass {median(bare) / 1024:.1f} MiB)",
            {"broker_kib": summary(ours), "floor_kib": summary(floor), "python_kib": summary(bare)},
        )
    )


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
    parser.add_argument("--concurrency", type=int, help="concurrent cycles (default 32, quick 8)")
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


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
