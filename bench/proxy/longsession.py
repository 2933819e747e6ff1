"""A long session: 8 simulated hours of steady requests in ``broker exec`` on one placeholder, tokens renewed behind it.

Part of ``scripts/bench`` (``--only longsession``), or alone: ``python -m
bench.proxy.longsession [--quick] [--hours 8]``. Time is scaled: one simulated
hour is ``SCALE`` (24) real seconds, so 8 hours take 192 s. The GitHub App
emulator's tokens end after 24 s (GitHub's hour) and the Vault token's ttl
is 24 s; 24 s is the shortest lifetime at which the renewal points are the
real ones (GitHub at 5/6 of its life, Vault at 2/3: the rotator keeps at least
2 x GRACE = 4 real seconds in reserve, which a shorter token would make the
later bound). The session itself is not scaled: ``ttl: 8h`` under a rule whose
``max_ttl`` is 8h, so no token is ever capped by what the session has left.

Both providers (the emulator and a real OpenBao dev server) sit behind
40 ms of latency (``tests.fixtures.slowproxy``: a round trip per request and
2 x RTT for each new connection, TCP + TLS), on both paths: the broker's
calls (mint, revoke) and the sandbox's requests (through the session's proxy,
a TLS front and the latency proxy to the server). ``broker exec --network
allowlist`` runs a Python client (``bench/proxy/sandbox_client.py``) in bubblewrap
which sends, five times a second for the whole session, one GitHub API
request and one Vault KV read, each on its own keep-alive tunnel, with the
placeholder it reads from its file each time. The figures: requests made and
failed (goal 0), distinct placeholders the sandbox saw (goal 1 per
credential), renewals counted twice (``credential.renewed`` in the issuance
log; tokens the emulator minted and Vault accessors the log issued), every
old token revoked (GitHub says ``revoked``, OpenBao no longer knows the
accessor), the slowest request (overall, after a tunnel's first, within 1 s
after a swap), and each renewal's own duration at this latency: from its
first provider call to ``credential.renewed``, less the ``GRACE`` it
deliberately waits before the old token is revoked.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import WORK, Report, Row, Settings
from broker.core.running.rotating import DEFAULT_FRACTION, FRACTION, GRACE
from devstack.github import APP_ID, OWNER, REPOSITORIES, new_emulator, rsa_key_pair, write_key
from devstack.openbao import ROOT_TOKEN, OpenBao, start_openbao, stop_openbao
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.slowproxy import SlowProxy, slow_proxy
from tests.fixtures.tls import TLSFront, backend_port, make_test_ca

SCALE = 24  # real seconds per simulated hour
RATE = 5  # requests per second to each provider
RTT = 0.040
HANDSHAKE_RTTS = 2.0  # TCP + TLS 1.3
REPO = f"{OWNER}/{REPOSITORIES[0]}"

#: The client in the sandbox (the system's python3 runs its text: the sandbox does not see this checkout).
CLIENT = (Path(__file__).parent / "sandbox_client.py").read_text()


class Timed(list[tuple[float, str]]):
    """A latency proxy's request lines, each with the wall-clock time it reached the proxy."""

    def append(self, line: Any) -> None:
        super().append((time.time(), str(line)))


@contextmanager
def latency(port: int) -> Iterator[SlowProxy]:
    with slow_proxy(port, RTT, every_request=True, handshake=HANDSHAKE_RTTS * RTT) as proxy:
        proxy.lines = Timed()  # type: ignore[assignment]
        yield proxy


def stamp(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(record["time"]).replace("Z", "+00:00")).timestamp()


def renewals(records: list[dict[str, Any]], calls: list[tuple[float, str]], name: str) -> list[dict[str, Any]]:
    """Each renewal of ``name``: ms from its first provider call to the new token in the proxy and to its end.

    Its calls are the broker's provider calls after the previous renewal (or the first issue) ended; its end is
    ``credential.renewed``, logged once the old token is revoked, ``GRACE`` after the swap unless the session
    ended meanwhile (then the grace was cut short: ``cut_short``).
    """
    issued = [r for r in records if r["event"] == "credential.issued" and r["credential"] == name]
    swaps = [stamp(r) for r in issued if r.get("renewal_of")]
    previous = min((stamp(r) for r in issued if not r.get("renewal_of")), default=0.0)
    found: list[dict[str, Any]] = []
    for record in (r for r in records if r["event"] == "credential.renewed" and r["credential"] == name):
        done = stamp(record)
        mine = [at for at, _ in calls if previous < at <= done]
        swapped = [at for at in swaps if previous < at <= done]
        if mine and swapped:
            first, swap = mine[0], swapped[0]
            found.append({"swapped_at": swap, "mint_ms": round((swap - first) * 1000, 1), "calls": len(mine),
                          "without_grace_ms": round((done - first - GRACE) * 1000, 1),
                          "cut_short": done - swap < GRACE})  # fmt: skip
        previous = done
    return found


def summarise(samples: list[list[Any]], epoch: float, swaps: list[float]) -> dict[str, Any]:
    """One target's requests: made, failed, the slowest (overall, after its tunnel's first, within 1 s of a swap)."""
    failed = [(at, status) for at, _, status in samples if status != "200"]
    # the first request on a tunnel pays for opening it (the proxy's CONNECT, 2 x RTT, TLS twice)
    firsts = {0} | {i + 1 for i, (_, _, status) in enumerate(samples) if status != "200"}
    steady = [(ms, at) for i, (at, ms, _) in enumerate(samples) if i not in firsts]
    near = [ms for i, (at, ms, _) in enumerate(samples) if i not in firsts
            and any(0 <= epoch + at - swap < 1.0 for swap in swaps)]  # fmt: skip
    ordered = sorted(ms for _, ms, _ in samples)
    slowest = max(samples, key=lambda sample: sample[1])
    return {
        "requests": len(samples),
        "failed": len(failed),
        "failures": failed[:10],
        "statuses": dict(Counter(status for _, _, status in samples)),
        "slowest_ms": slowest[1],
        "slowest_at_s": slowest[0],
        "first_ms": samples[0][1] if samples else 0.0,
        "slowest_steady_ms": max(steady, default=(0.0, 0.0))[0],
        "slowest_steady_at_s": max(steady, default=(0.0, 0.0))[1],
        "near_swap": {"n": len(near), "slowest_ms": max(near, default=0.0)},
        "median_ms": ordered[len(ordered) // 2],
        "p99_ms": ordered[int(len(ordered) * 0.99)],
    }


def setup(work: Path, stack: ExitStack) -> tuple[BrokerEnv, Path, dict[str, Any], Any]:
    """The providers behind latency, a broker installation, the task; what the figure checks afterwards."""
    bao: OpenBao = start_openbao()
    stack.callback(stop_openbao, bao)
    bao.client().secrets.kv.v2.create_or_update_secret(path="ci/build", secret={"value": "kept-in-vault"})
    keys = rsa_key_pair()
    emulator = new_emulator(keys).start()
    stack.callback(emulator.stop)
    emulator.state.token_ttl = SCALE
    github_api = stack.enter_context(latency(backend_port(emulator.url)))
    github_data = stack.enter_context(latency(backend_port(emulator.url)))
    vault_api = stack.enter_context(latency(backend_port(bao.addr)))
    vault_data = stack.enter_context(latency(backend_port(bao.addr)))
    (work / "ca").mkdir()
    test_ca = make_test_ca(work / "ca", ["fronts.test"])
    github = TLSFront(test_ca.context, github_data.port)
    vault = TLSFront(test_ca.context, vault_data.port)
    stack.callback(github.close)
    stack.callback(vault.close)
    env = make_env(work)
    stack.callback(env.cleanup)
    fronts = {"upstream_ca_file": str(test_ca.cert_file)}
    env.add_provider(
        "vault",
        {
            "type": "vault",
            "addr": vault_api.addr,
            "token_file": str(env.write_secret("vault-token", ROOT_TOKEN)),
            "token_role": "broker-session",
            "proxy_hosts": [f"127.0.0.1:{vault.port}"],
            **fronts,
        },
    )
    env.add_provider(
        "github",
        {
            "type": "github_app",
            "app_id": str(APP_ID),
            "private_key_file": str(write_key(work / "app.pem", keys.private_pem)),
            "api_url": github_api.addr + emulator.prefix,
            "proxy_hosts": [f"127.0.0.1:{github.port}"],
            **fronts,
        },
    )
    network = f'["127.0.0.1:{github.port}", "127.0.0.1:{vault.port}"]'
    env.write_policy(
        f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    max_ttl: 8h
    network: {network}
    grants:
      - provider: vault
        policies: ["ci-*"]
        max_uses: 1000000
      - provider: github
        repositories: ["{REPO}"]
        permissions: {{contents: read, metadata: read}}
"""
    )
    task = env.write_task(
        f"""
        version: 1
        task: fix-long-session
        ttl: 8h
        sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
        network:
          allow: {network}
        credentials:
          - name: repo
            provider: github
            repositories: [{REPO}]
            permissions: {{contents: read}}
            inject: proxy
          - name: kv
            provider: vault
            policies: [ci-read]
            ttl: {SCALE}s
            num_uses: 1000000
            inject: proxy
        """
    )
    targets = {
        "github": {"host": f"127.0.0.1:{github.port}", "path": "/installation/repositories",
                   "file": "/run/secrets/repo/token", "header": "Authorization", "form": "token {}"},
        "vault": {"host": f"127.0.0.1:{vault.port}", "path": "/v1/secret/data/ci/build",
                  "file": "/run/secrets/kv/token", "header": "X-Vault-Token", "form": "{}"},
    }  # fmt: skip
    return env, task, targets, (emulator, bao, github_api, vault_api)


def run(work: Path, hours: float) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    seconds = hours * SCALE
    with ExitStack() as stack:
        env, task, targets, (emulator, bao, github_api, vault_api) = setup(work, stack)
        workspace = work / "workspace"
        workspace.mkdir()
        os.chown(workspace, 1000, 1000)
        began = time.perf_counter()
        result = env.run_process(
            "exec", "--task", str(task), "--network", "allowlist", "--workspace", str(workspace),
            "--", "/usr/bin/python3", "-I", "-c", CLIENT, str(seconds), str(RATE), json.dumps(targets),
            timeout=seconds + 300,
        )  # fmt: skip
        took = time.perf_counter() - began
        if result.code != 0 or not result.stdout.strip():
            raise RuntimeError(f"bench.proxy.longsession: exec exited {result.code}: {result.stderr.strip()[-400:]}")
        seen = json.loads(result.stdout.strip().splitlines()[-1])
        records = env.log_records()
        renewal = {"repo": renewals(records, list(github_api.lines), "repo"),
                   "kv": renewals(records, list(vault_api.lines), "kv")}  # fmt: skip
        client: dict[str, Any] = {"behind_schedule_s": seen["behind_schedule_s"]}
        for target, name in (("github", "repo"), ("vault", "kv")):
            swaps = [r["swapped_at"] for r in renewal[name]]
            client[target] = summarise(seen[target]["samples"], seen["epoch"], swaps)
            client[target] |= {"placeholders": seen[target]["placeholders"], "tunnels": seen[target]["tunnels"]}
        renewed = {n: sum(1 for r in records if r["event"] == "credential.renewed" and r["credential"] == n)
                   for n in ("repo", "kv")}  # fmt: skip
        issued = [r for r in records if r["event"] == "credential.issued"]
        tokens = list(emulator.state.tokens)
        accessors = [r["reference"]["accessor"] for r in issued if r["credential"] == "kv"]
        revoked_reasons = [r["reason"] for r in records if r["event"] == "credential.revoked"]
        verify = env.run("audit", "verify")
        return {
            "simulated_hours": hours,
            "real_seconds": seconds,
            "scale_s_per_hour": SCALE,
            "rtt_ms": RTT * 1000,
            "rate_per_s": RATE,
            "exec_seconds": round(took, 1),
            "client": client,
            "renewed_logged": renewed,
            "github_tokens_minted": len(tokens),
            "github_tokens_revoked": sum(1 for t in tokens if emulator.state.token_state(t) == "revoked"),
            "vault_tokens_issued": len(accessors),
            "vault_tokens_revoked": sum(1 for a in accessors if not bao.accessor_exists(a)),
            "revoked_as_renewed": revoked_reasons.count("renewed"),
            "renewal": renewal,
            "expected_renewals": {
                "repo": round(seconds / (SCALE * FRACTION["github_app"]), 1),
                "kv": round(seconds / (SCALE * DEFAULT_FRACTION), 1),
            },
            "audit_verify": verify.code,
            "load_average": list(os.getloadavg()),
        }


def add_rows(result: dict[str, Any], report: Report) -> None:
    client, renewed, renewal = result["client"], result["renewed_logged"], result["renewal"]
    targets = ("github", "vault")
    made = sum(client[n]["requests"] for n in targets)
    failed = sum(client[n]["failed"] for n in targets)
    placeholders = max(client[n]["placeholders"] for n in targets)
    every_old_revoked = (
        result["github_tokens_revoked"] == result["github_tokens_minted"] == 1 + renewed["repo"]
        and result["vault_tokens_revoked"] == result["vault_tokens_issued"] == 1 + renewed["kv"]
        and result["revoked_as_renewed"] == sum(renewed.values())
    )
    whole = {n: [r["without_grace_ms"] for r in renewal[n] if not r["cut_short"]] for n in ("repo", "kv")}
    mint = {n: [r["mint_ms"] for r in renewal[n]] for n in ("repo", "kv")}
    ok = failed == 0 and placeholders == 1 and every_old_revoked and min(renewed.values()) > 0
    github, vault = client["github"], client["vault"]

    def pair(key: str) -> str:
        return f"{github[key]:.0f} / {vault[key]:.0f}"

    def most(spans: dict[str, list[float]]) -> str:
        return f"{max(spans['repo'], default=0):.0f} / {max(spans['kv'], default=0):.0f}"

    near = f"{github['near_swap']['slowest_ms']:.0f} / {vault['near_swap']['slowest_ms']:.0f}"
    report.add(
        Row(
            "longsession",
            f"long session: {result['simulated_hours']:g} simulated hours in broker exec, providers at"
            f" {result['rtt_ms']:.0f} ms, {RATE}/s to GitHub and to Vault: placeholders seen, requests failed",
            f"{placeholders} placeholder, {failed} failed",
            "",
            "1 placeholder, 0 failed",
            ok and result["audit_verify"] == 0,
            f"({made} requests, {failed} failed; renewals logged: GitHub {renewed['repo']} (tokens minted"
            f" {result['github_tokens_minted']}, revoked {result['github_tokens_revoked']}), Vault {renewed['kv']}"
            f" (tokens {result['vault_tokens_issued']}, revoked {result['vault_tokens_revoked']}); at most"
            f" {result['expected_renewals']['repo']:g} and {result['expected_renewals']['kv']:g} by the clock;"
            f" GitHub / Vault: slowest request {pair('slowest_ms')} ms at {pair('slowest_at_s')} s; each tunnel's"
            f" first {pair('first_ms')} ms; within 1 s after a swap {near} ms; medians {pair('median_ms')} ms;"
            f" a renewal, its {GRACE:.0f} s grace left out: {most(whole)} ms at most (mint to swap {most(mint)});"
            f" 1 simulated hour = {SCALE} s; load average {result['load_average'][0]:.1f})",
            result,
        )
    )


def figure_longsession(settings: Settings, report: Report) -> None:
    work = Path(tempfile.mkdtemp(prefix="longsession-", dir=WORK if WORK.exists() else None))
    try:
        add_rows(run(work, 2 if settings.quick else 8), report)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2 simulated hours instead of 8")
    parser.add_argument("--hours", type=float, help="simulated hours (default 8, quick 2)")
    args = parser.parse_args()
    report = Report()
    work = Path(tempfile.mkdtemp(prefix="longsession-"))
    try:
        result = run(work, args.hours or (2 if args.quick else 8))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    add_rows(result, report)
    print(json.dumps(result, indent=1))
    return 0 if all(row.ok is not False for row in report.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
