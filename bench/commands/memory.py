"""The memory figure: peak RSS of ``broker issue`` (ru_maxrss of the child) vs the floor and ``python -c pass``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bench.common import FLOOR, PYTHON, WORK, Report, Row, Settings, median, must, peak_rss_kib, summary
from bench.local import BrokerSetup, Stack, base_env, floor_params


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
