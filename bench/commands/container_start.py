"""The container figure: ``broker exec`` start to the command's first output, in podman vs in bubblewrap.

Part of ``scripts/bench`` (``--only containers``), or alone: ``python -m
bench.commands.container_start [--runs 15]``. One broker installation against
a real OpenBao dev server, one manifest (a Vault token, ``--network none``),
and the same command, ``sh -c 'echo up; exit 0'``, run ``--runs`` times on each
side, alternating: ``--sandbox bwrap`` and ``--sandbox podman --image IMAGE``
(rootful podman with ``--runtime runc``, the image made from a root file system
as the tests make it, ``tests.fixtures.containers``). Each run is timed from the
``broker exec`` process's start to the first byte of the command's output
(issue, the sandbox's start, the command's first line) and to its exit (the
revocation and, for podman, the container's removal too). The figure is the
median of each and the container's extra (podman - bwrap) at the median; no
goal: it says what a container costs here. Needs root and podman; without
them the figure says why it did not run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import WORK, Report, Row, Settings, median
from devstack.openbao import ROOT_TOKEN, TOKEN_ROLE, start_openbao, stop_openbao
from tests.fixtures.brokerenv import make_env
from tests.fixtures.containers import PODMAN_OPTIONS, podman_unavailable, rootfs_tarball

TASK = """
version: 1
task: fix-bench-1
ttl: 10m
sandbox: {uid: 1000, gid: 1000, mount_path: /run/secrets}
credentials:
  - {name: kv, provider: vault, policies: [ci-read], ttl: 5m, num_uses: 5}
"""
COMMAND = ("sh", "-c", "echo up; exit 0")


def timed(argv: list[str]) -> tuple[float, float]:
    """Seconds from the start to the first byte of output, and to the exit (which must be 0)."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    first = process.stdout.read(1)
    at_first = time.perf_counter() - start
    _, stderr = process.communicate(timeout=120)
    at_end = time.perf_counter() - start
    if process.returncode != 0 or first != b"u":
        raise RuntimeError(f"exec failed ({process.returncode}): {stderr.decode(errors='replace')[-300:]}")
    return at_first, at_end


def run(work: Path, runs: int) -> dict[str, Any]:
    bao = start_openbao()
    podman = shutil.which("podman") or "podman"
    image = f"localhost/broker-bench-{os.getpid()}:1"
    env = make_env(work)
    try:
        env.add_provider(
            "vault",
            {
                "type": "vault",
                "addr": bao.addr,
                "token_file": str(env.write_secret("vault-token", ROOT_TOKEN)),
                "token_role": TOKEN_ROLE,
            },
        )
        env.tables["sandbox.podman"] = dict(PODMAN_OPTIONS)
        env.write_config()
        (work / "rootfs.tar").write_bytes(rootfs_tarball())
        subprocess.run([podman, "import", "--quiet", str(work / "rootfs.tar"), image], capture_output=True, check=True)
        task = str(env.write_task(TASK))
        base = [sys.executable, "-m", "broker", "--config", str(env.config_path), "exec", "--task", task]
        sides = {
            "bwrap": [*base, "--sandbox", "bwrap", "--network", "none", "--", *COMMAND],
            "podman": [*base, "--sandbox", "podman", "--image", image, "--network", "none", "--", *COMMAND],
        }
        samples: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
        for argv in sides.values():
            timed(argv)  # a first run of each: caches warm on both sides alike
        for _ in range(runs):
            for side, argv in sides.items():
                samples[side].append(timed(argv))
    finally:
        env.cleanup()
        subprocess.run([podman, "rmi", "--force", image], capture_output=True, check=False)
        stop_openbao(bao)
    result: dict[str, Any] = {"runs": runs, "load": [round(x, 2) for x in os.getloadavg()]}
    for side, values in samples.items():
        result[side] = {
            "first_ms": round(median([first for first, _ in values]) * 1000, 1),
            "end_ms": round(median([end for _, end in values]) * 1000, 1),
            "samples": [[round(a * 1000, 1), round(b * 1000, 1)] for a, b in values],
        }
    result["extra_first_ms"] = round(result["podman"]["first_ms"] - result["bwrap"]["first_ms"], 1)
    result["extra_end_ms"] = round(result["podman"]["end_ms"] - result["bwrap"]["end_ms"], 1)
    return result


def add_rows(result: dict[str, Any], report: Report) -> None:
    detail = f"{result['runs']} runs each, alternating; load {result['load']}"
    bwrap, podman = result["bwrap"], result["podman"]
    report.add(Row("containers", "exec start to first output, bwrap", bwrap["first_ms"], "ms", "", None, detail))
    report.add(Row("containers", "exec start to first output, podman", podman["first_ms"], "ms", "", None, detail))
    extra = f"to exit: bwrap {bwrap['end_ms']} ms, podman {podman['end_ms']} ms"
    report.add(Row("containers", "container's extra to first output", result["extra_first_ms"], "ms", "", None, extra))


def figure_containers(settings: Settings, report: Report) -> None:
    reason = podman_unavailable()
    if reason:
        report.notes.append(f"containers: not run ({reason})")
        return
    work = Path(tempfile.mkdtemp(prefix="containers-", dir=WORK if WORK.exists() else None))
    try:
        add_rows(run(work, 5 if settings.quick else 15), report)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=15, help="runs of each side (default 15)")
    args = parser.parse_args()
    reason = podman_unavailable()
    if reason:
        print(f"containers: not run ({reason})")
        return 2
    work = Path(tempfile.mkdtemp(prefix="containers-"))
    report = Report()
    try:
        result = run(work, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    add_rows(result, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
