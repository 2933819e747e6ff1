"""The sweep figure: one ``broker sweep`` over N expired Vault sessions (seeded through the Python API)."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

from bench.common import PYTHON, ROOT, SEED, SWEEP_TASK, Report, Row, Settings, median, must, run, summary
from bench.local import BrokerSetup, Stack, base_env, unmount_under


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
        must(run([PYTHON, *SEED, str(setup.config), str(setup.task), "1"], env=env), "seed warm-up")  # key, store
        seeders = [
            subprocess.Popen(
                [PYTHON, *SEED, str(setup.config), str(setup.task), str(count)],
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
