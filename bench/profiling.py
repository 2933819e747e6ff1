"""cProfile of one ``broker`` command, the mint/revoke worker threads included.

    python -m bench.profiling [--top N] [--out DIR] -- --config CFG issue --task T --json

Runs ``broker.cli.app.main(ARGS)`` in this process (a fresh interpreter, so every
import the command triggers is profiled too) with the main thread under
cProfile and every ``ThreadPoolExecutor`` worker under a profiler of its
own, then prints the top functions by cumulative time per thread (wall-clock
per thread: threads overlap) and writes ``DIR/<thread>.pstats`` for snakeviz
or ``python -m pstats``. ``scripts/bench --serve`` keeps a stack and a config
up to run this against.
"""

from __future__ import annotations

import argparse
import concurrent.futures.thread as pool_threads
import cProfile
import io
import pstats
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profiling")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "profile")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then the broker arguments")
    options = parser.parse_args(argv)
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    profiles: list[tuple[str, cProfile.Profile, float]] = []
    lock = threading.Lock()
    original = pool_threads._worker

    def profiled_worker(*a: Any, **k: Any) -> Any:
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        try:
            return original(*a, **k)
        finally:
            profile.disable()
            with lock:
                profiles.append((threading.current_thread().name, profile, time.perf_counter() - start))

    pool_threads._worker = profiled_worker
    main_profile = cProfile.Profile()
    start = time.perf_counter()
    main_profile.enable()
    code = 0
    try:
        from broker.cli.app import main as broker_main

        code = broker_main(args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        main_profile.disable()
    wall = time.perf_counter() - start
    options.out.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    report = [f"broker {' '.join(args)}: exit {code}, {wall * 1000:.0f} ms in main (after interpreter start)"]
    for name, profile, seconds in [("MainThread", main_profile, wall), *sorted(profiles, key=lambda p: p[0])]:
        profile.dump_stats(options.out / f"{name}.pstats")
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text)
        stats.sort_stats("cumulative").print_stats(options.top)
        report.append(f"\n===== {name}: {seconds * 1000:.0f} ms =====")
        report.append("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:20000])
    print("\n".join(report), file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
