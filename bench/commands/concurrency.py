"""The concurrent figure: N processes at once, each ``issue`` then ``revoke``; failures; ``audit verify`` after."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from bench.common import Report, Row, Settings, children_cpu, median, run, summary
from bench.local import BrokerSetup, Stack, base_env


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
