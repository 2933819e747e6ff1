"""Figures 2 and 3: ``broker issue`` and ``broker revoke`` of the stack task vs the floor, interleaved."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from bench.common import FLOOR, PYTHON, Report, Row, Settings, median, must, run, summary
from bench.local import BrokerSetup, Stack, base_env, floor_params


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
