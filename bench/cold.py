"""The cold-start figure: ``broker --version`` and ``--help`` (also ``python -m broker.cli``) vs ``python -c pass``."""

from __future__ import annotations

import random

from bench.common import BROKER, PYTHON, Report, Row, Settings, median, must, run, summary
from bench.local import base_env


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
