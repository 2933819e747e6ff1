"""The SigV4 figures: what verifying and re-signing adds per small AWS request, and a 256 MiB upload through it.

Part of ``scripts/bench`` (``--only awsproxy``), or alone:
``python -m bench.proxy.aws_resign [--quick]``.

The proxies (re-signing, and the same terminated path without it) and the
upstream each run in a child process of their own (``bench.proxy.aws_sides``);
every request is an ``egress.request`` record on a real, signed issuance log.

- Per small request: the same botocore-signed requests (STS
  ``GetCallerIdentity``, whose body hash the proxy must check before it
  re-signs, and an S3 ``GetObject``) sent again and again over one kept
  connection direct and through the proxy, sides alternating; the figure is
  the difference of the medians. A third side, the same terminated path with
  no re-signing (a proxy whose credential these requests do not hold), says
  how much of it is the SigV4 work and how much the TLS termination.
- A 256 MiB ``put_object`` (botocore's default: aws-chunked with a trailing
  CRC32, which the proxy checks as it streams) direct and through the proxy,
  rounds alternating; the figure is the median of the per-round throughput
  ratios, on loopback and over the bench's modelled link (``bench.proxy.gitpush``'s
  ``LINK``: 40 ms RTT, 1 Gbit/s, between the proxy and the upstream); the
  terminated path without re-signing beside it.
- The proxy's CPU per small request, terminated (TLS both sides, every
  request on the log, no re-signing) and re-signed: the same kept
  connections, blocks of requests with the sides alternating, the CPU
  seconds the proxy child's threads ran in a block (``schedstat``: the
  event loop and the evidence writer together, not inflated by waiting for a
  core) over its requests; the median block. The goal is the gateway's
  (issue 36): at most 0.5 ms a terminated request.
- The proxy child's peak RSS (``VmHWM``) once the uploads are done.

Beside each upload figure, where the CPU went in a round (per process, from
``/proc/PID/task/*/schedstat``: seconds run, and seconds the proxy waited
runnable for a CPU) and the load average: client, proxy, link and upstream
share this machine's cores, so when the proxy cannot get a CPU the figure
measures the CPU the path costs, not the link.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import WORK, Report, Row, Settings, schedstat
from bench.proxy.aws_sides import KEYS, PROXY, UPSTREAM, Sides, connection, signed_requests

__all__ = ["KEYS", "PROXY", "UPSTREAM", "Sides", "connection", "figure_awsproxy", "signed_requests"]

CPU_GOAL_MS = 0.5  # the gateway's goal for a terminated request (issue 36)


def cpu_per_request(
    sides: Sides,
    raw: dict[str, tuple[str, str, bytes, dict[str, str]]],
    conns: dict[str, http.client.HTTPSConnection],
    blocks: int,
    per: int,
) -> dict[str, dict[str, Any]]:
    """Milliseconds of CPU the proxy child runs per request (``schedstat``, every thread), each side and kind in
    blocks of ``per`` requests on its kept connection, the sides alternating; the median block and the spread."""
    children = {"terminated": sides.plain, "proxied": sides.proxy}
    found: dict[str, dict[str, list[float]]] = {side: {kind: [] for kind in raw} for side in children}
    for block in range(blocks):
        for side in children if block % 2 == 0 else tuple(reversed(children)):
            child = children[side]
            assert child is not None
            for kind, (method, path, body, headers) in raw.items():
                time.sleep(0.02)  # the evidence of the block before is written: its CPU counts there
                before = schedstat(child.process.pid)[0]
                for _ in range(per):
                    conns[side].request(method, path, body=body or None, headers=headers)
                    conns[side].getresponse().read()
                time.sleep(0.02)
                found[side][kind].append((schedstat(child.process.pid)[0] - before) / per * 1000)
    return {
        side: {
            kind: {"median_ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v), "blocks": len(v)}
            for kind, v in by_kind.items()
        }
        for side, by_kind in found.items()
    }


def small_requests(work: Path, requests: int, *, blocks: int = 15, per: int = 200) -> dict[str, Any]:
    sides = Sides(work, terminated=True)
    order = ("direct", "terminated", "proxied")
    try:
        raw = signed_requests(sides)
        conns = {side: connection(sides, side) for side in order}
        samples: dict[str, dict[str, list[float]]] = {kind: {side: [] for side in order} for kind in raw}
        for number in range(requests + 50):
            kind = "sts" if number % 2 else "s3"
            method, path, body, headers = raw[kind]
            for side in order if number % 3 else tuple(reversed(order)):  # the order rotates: drift falls on all
                start = time.perf_counter()
                conns[side].request(method, path, body=body or None, headers=headers)
                answer = conns[side].getresponse()
                answer.read()
                elapsed = (time.perf_counter() - start) * 1000
                assert answer.status == 200, (side, kind, answer.status)
                if number >= 50:
                    samples[kind][side].append(elapsed)
        cpu = cpu_per_request(sides, raw, conns, blocks, per)
        load = round(os.getloadavg()[0], 2)
        for conn in conns.values():
            conn.close()
    finally:
        sides.close()
    found: dict[str, Any] = {
        kind: {side: {"median_ms": statistics.median(v), "n": len(v)} for side, v in by_side.items()}
        for kind, by_side in samples.items()
    }
    return found | {"cpu": cpu, "cpu_per": per, "load": load}


def big_upload(work: Path, mib: int, rounds: int, **link: Any) -> dict[str, Any]:
    sides = Sides(work, terminated=True, **link)
    body = os.urandom(mib << 20)
    samples: dict[str, list[float]] = {"direct": [], "terminated": [], "proxied": []}
    cpu: dict[str, list[float]] = {side: [] for side in samples}  # seconds every process of the path ran, a round
    waited: dict[str, list[float]] = {"terminated": [], "proxied": []}  # seconds the proxy waited for a CPU
    pids = {
        "client": os.getpid(),
        "upstream": sides.upstream.process.pid,
        "link": sides.link.process.pid if sides.link is not None else None,
        "proxied": sides.proxy.process.pid,
        "terminated": sides.plain.process.pid if sides.plain is not None else None,
    }
    try:
        clients = {side: sides.client("s3", side) for side in samples}
        for number in range(rounds):
            for side in tuple(samples) if number % 2 == 0 else tuple(reversed(samples)):
                path = ("client", "upstream", "link") + ((side,) if side != "direct" else ())
                before = {name: schedstat(pids[name]) for name in path}
                start = time.perf_counter()
                clients[side].put_object(Bucket="agent-bucket", Key=f"big-{number}", Body=body)
                samples[side].append(time.perf_counter() - start)
                after = {name: schedstat(pids[name]) for name in path}
                cpu[side].append(sum(after[name][0] - before[name][0] for name in path))
                if side in waited:
                    waited[side].append(after[side][1] - before[side][1])
        peak = sides.peak_rss_mib()
    finally:
        sides.close()
    ratios = [d / p for d, p in zip(samples["direct"], samples["proxied"], strict=True)]
    return {
        "mib": mib,
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "direct_mib_s": mib / statistics.median(samples["direct"]),
        "proxied_mib_s": mib / statistics.median(samples["proxied"]),
        "terminated_mib_s": mib / statistics.median(samples["terminated"]),
        "cpu_s": {side: statistics.median(v) for side, v in cpu.items()},
        "proxy_waited_s": statistics.median(waited["proxied"]),
        "load": round(os.getloadavg()[0], 2),
        "peak_rss_mib": peak,
        "samples": samples,
    }


def add_cpu_rows(small: dict[str, Any], report: Report) -> None:
    cpu = small["cpu"]
    for side, title in (("terminated", "terminated (TLS both sides)"), ("proxied", "re-signed (SigV4)")):
        found = cpu[side]
        worst = max(found[kind]["median_ms"] for kind in found)
        goal = side == "terminated"
        blocks = found["sts"]["blocks"]
        per = small["cpu_per"]
        report.add(
            Row(
                "awsproxy",
                f"awsproxy: the proxy's CPU per small request, {title}, the dearer of STS and S3",
                round(worst, 3),
                "ms",
                f"<= {CPU_GOAL_MS} ms" if goal else "",
                worst <= CPU_GOAL_MS if goal else None,
                f"(STS GetCallerIdentity {found['sts']['median_ms']:.3f} ms, S3 GetObject"
                f" {found['s3']['median_ms']:.3f} ms: the proxy child's threads, event loop and evidence writer, from"
                f" schedstat; median of {blocks} blocks of {per} requests on one kept connection, sides alternating,"
                f" blocks {min(found[k]['min_ms'] for k in found):.3f}-{max(found[k]['max_ms'] for k in found):.3f}"
                f" ms; every request on the log; load {small['load']})",
                found,
            )
        )


def add_rows(small: dict[str, Any], uploads: dict[str, dict[str, Any]], report: Report) -> None:
    add_cpu_rows(small, report)
    for kind, title in (("sts", "STS GetCallerIdentity (body hash checked)"), ("s3", "S3 GetObject")):
        found = small[kind]
        added = found["proxied"]["median_ms"] - found["direct"]["median_ms"]
        resign = found["proxied"]["median_ms"] - found["terminated"]["median_ms"]
        report.add(
            Row(
                "awsproxy",
                f"awsproxy: verify + re-sign added per small request, {title}",
                round(added, 3),
                "ms",
                "< 2 ms",
                added < 2.0,
                f"(median {found['proxied']['median_ms']:.2f} through the proxy vs {found['direct']['median_ms']:.2f}"
                f" ms direct; of it, verify + re-sign alone: {resign:.2f} ms against the same terminated path"
                f" without it, {found['terminated']['median_ms']:.2f} ms; {found['direct']['n']} each, sides"
                " alternating, one kept connection per side, every request logged)",
                found,
            )
        )
    peak = 0.0
    for title, found in uploads.items():
        goal = 0.95 if "link" in title else 0.5
        peak = max(peak, found["peak_rss_mib"])
        report.add(
            Row(
                "awsproxy",
                f"awsproxy: a {found['mib']} MiB put_object (aws-chunked) through the proxy / direct, {title}",
                round(found["ratio"] * 100, 1),
                "%",
                f">= {goal:.0%}",
                found["ratio"] >= goal,
                f"({found['proxied_mib_s']:.0f} vs {found['direct_mib_s']:.0f} MiB/s; the same terminated path"
                f" without re-signing: {found['terminated_mib_s']:.0f} MiB/s; median of"
                f" {len(found['samples']['direct'])} alternating rounds, ratio"
                f" {found['ratio_min'] * 100:.0f}-{found['ratio_max'] * 100:.0f}%; CPU a round, every process of"
                f" the path: {found['cpu_s']['direct']:.2f} s direct, {found['cpu_s']['proxied']:.2f} s through the"
                f" proxy, which waited {found['proxy_waited_s']:.2f} s runnable for a CPU; load {found['load']})",
                {k: v for k, v in found.items() if k != "samples"} | {"samples": json.dumps(found["samples"])},
            )
        )
    report.add(
        Row(
            "awsproxy",
            "awsproxy: the proxy's peak RSS through the uploads",
            round(peak, 1),
            "MiB",
            "< 64 MiB",
            peak < 64,
            "(VmHWM of the proxy process: Python, the TLS stack, botocore's signer, the evidence writer)",
        )
    )


def measure(work: Path, *, quick: bool, requests: int, report: Report) -> None:
    blocks, per = (3, 100) if quick else (15, 200)
    small = small_requests(work / "small", 100 if quick else requests, blocks=blocks, per=per)
    mib, rounds = (32, 2) if quick else (256, 3)
    rate = 1000 * 1e6 / 8
    uploads = {
        "40 ms RTT, 1000 Mbit/s link": big_upload(
            work / "wan", mib, rounds, delay=0.02, rate=rate, window=int(rate * 0.04) + (1 << 20)
        ),
        "loopback": big_upload(work / "loopback", mib, rounds),
    }
    add_rows(small, uploads, report)


def figure_awsproxy(settings: Settings, report: Report) -> None:
    work = Path(tempfile.mkdtemp(prefix="awsproxy-", dir=WORK if WORK.exists() else None))
    measure(work, quick=settings.quick, requests=settings.egress_requests, report=report)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.proxy.aws_resign", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    measure(Path(tempfile.mkdtemp(prefix="awsproxy-")), quick=args.quick, requests=args.requests, report=Report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
