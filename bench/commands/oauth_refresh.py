"""OAuth refreshes under concurrent sessions sharing one refresh token: races, reuse detections, refreshes per expiry.

Part of ``scripts/bench`` (``--only oauthrefresh``), or alone: ``python -m
bench.commands.oauth_refresh [--quick]``. A real authorisation server
(``devstack.oauth.server``: authlib, TLS on loopback, refresh tokens that
rotate, a replaced one presented again revoking its family) and 20 broker
processes of one host, each a session of one ``oauth`` credential. Each
process opens its broker as a command does (``Broker.open``: the host's lock
directory handed to the provider), then at each expiry mints the session's
next token as its renewal does, all 20 at the same instant (sessions begun
together end together: the worst case). The server counts, per family, the
refresh requests that arrived while another of the family was being answered
(races), replaced tokens presented again (reuse detections) and the refreshes
it answered; one refresh per expiry is ``refreshes / (sessions x expiries)``.
Rounds alternate between the broker as built and the same processes without
the host's lock (``use_lock_dir`` never called: each process serialises only
its own threads), which is what the single flight prevents. Each refresh is
answered 20 ms late at the server (a round trip to a real one), so a race has
room to happen.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

from bench.common import WORK, Report, Row, Settings
from broker.core.broker import Broker
from broker.core.inputs.config import load_config
from broker.egress.terminate.ca import SessionCA
from broker.vocab.errors import ManifestError
from broker.vocab.fields import Fields
from devstack.oauth.server import AuthorizationServer
from providers.base import MintContext

SESSIONS = 20
CLIENT, SECRET = "broker", "bench-client-secret"
SCOPES = "issues:read pulls:write"
DELAY = 0.02


def _write_private(path: Path, text: str) -> Path:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


def _config(work: Path, server: AuthorizationServer, ca_file: Path, refresh: str) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    (work / "policies").mkdir(exist_ok=True)
    table = {
        "token_url": server.token_url,
        "revocation_url": server.revocation_url,
        "client_id": CLIENT,
        "client_secret_file": str(_write_private(work / "client-secret", SECRET)),
        "refresh_token_file": str(_write_private(work / "refresh-token", refresh)),
        "ca_file": str(ca_file),
        "proxy_hosts": ["mcp.example.com:443"],
    }
    lines = [
        f'state_dir = "{work / "state"}"',
        f'runtime_dir = "{work / "run"}"',
        f'policy_dir = "{work / "policies"}"',
        f'audit_key = "{work / "audit.key"}"',
        "\n[providers.oauth]",
        'type = "oauth"',
        *(f"{key} = {json.dumps(value)}" for key, value in table.items()),
    ]
    path = work / "broker.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _session(config_path: str, flight: bool, number: int, starts: list[float], out: Any) -> None:
    """One session's process: its broker opened as a command opens it, then one mint per expiry."""
    config = load_config(Path(config_path))
    provider: Any = config.providers["oauth"]
    if flight:
        Broker.open(config)  # hands the provider the host's lock directory (state_dir/locks)
    fields = Fields({"scopes": SCOPES.split()}, "credentials[0]", ManifestError)
    asked = type(provider).parse_request(fields, name="mcp", provider="oauth", ttl=None)
    outcomes = []
    for generation, start in enumerate(starts):
        time.sleep(max(0.0, start - time.time()))
        context = MintContext(
            session_id=f"s-bench{number:05d}",
            task="fix-mcp-bench",
            requester="bench",
            ttl=600,
            session_expires_at=datetime.now(UTC) + timedelta(hours=1),
            mount_dir=PurePosixPath("/run/secrets/mcp"),
            generation=generation,
            proxied=True,
        )
        try:
            provider.mint(asked, context)
            outcomes.append(("minted", time.time() - start))
        except Exception as exc:  # counted: what a session would have reported
            outcomes.append((getattr(exc, "message", type(exc).__name__)[:120], time.time() - start))
    out.put(outcomes)


def _round(server: AuthorizationServer, work: Path, ca_file: Path, flight: bool, expiries: int) -> dict[str, Any]:
    ledger = server.ledger
    before = (ledger.races, ledger.reuse_detections, sum(ledger.refreshes.values()))
    config = _config(work, server, ca_file, server.authorise(CLIENT, "operator", SCOPES))
    if flight:
        Broker.open(load_config(config))  # the state directory and keys made once, before the sessions start
    fork = multiprocessing.get_context("fork")
    out = fork.Queue()
    first = time.time() + 2.0
    starts = [first + 1.5 * index for index in range(expiries)]
    processes = [
        fork.Process(target=_session, args=(str(config), flight, number, starts, out)) for number in range(SESSIONS)
    ]
    for process in processes:
        process.start()
    results = [out.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    minted = sum(1 for result in results for outcome, _ in result if outcome == "minted")
    failures = sorted({outcome for result in results for outcome, _ in result if outcome != "minted"})
    slowest = [max(result[index][1] for result in results) for index in range(expiries)]
    return {
        "side": "single flight" if flight else "no host lock",
        "expiries": SESSIONS * expiries,
        "minted": minted,
        "races": ledger.races - before[0],
        "reuse_detections": ledger.reuse_detections - before[1],
        "refreshes": sum(ledger.refreshes.values()) - before[2],
        "failures": failures[:3],
        "all_renewed_s": statistics.median(slowest),
    }


def run(work: Path, rounds: int, expiries: int) -> dict[str, Any]:
    ca = SessionCA(["127.0.0.1"], datetime.now(UTC) + timedelta(hours=1), label="bench oauth")
    ca_file = work / "oauth-ca.pem"
    work.mkdir(parents=True, exist_ok=True)
    ca_file.write_bytes(ca.pem)
    sides: dict[str, list[dict[str, Any]]] = {"single flight": [], "no host lock": []}
    with AuthorizationServer(ca.server_context("127.0.0.1")) as server:
        server.refresh_delay = DELAY
        server.add_client(CLIENT, secret=SECRET, grant_types=("refresh_token",), scopes=tuple(SCOPES.split()))
        for number in range(rounds):
            for flight in (True, False):
                result = _round(server, work / f"round-{number}-{int(flight)}", ca_file, flight, expiries)
                sides[result["side"]].append(result)
    return {"sides": sides, "sessions": SESSIONS, "load_average": list(os.getloadavg())}


def _sum(results: list[dict[str, Any]], key: str) -> int:
    return sum(int(result[key]) for result in results)


def add_rows(result: dict[str, Any], report: Report) -> None:
    ours, without = result["sides"]["single flight"], result["sides"]["no host lock"]
    expiries, refreshes = _sum(ours, "expiries"), _sum(ours, "refreshes")
    races, reuse, minted = _sum(ours, "races"), _sum(ours, "reuse_detections"), _sum(ours, "minted")
    per_expiry = refreshes / expiries if expiries else 0.0
    ok = races == 0 and reuse == 0 and minted == expiries and refreshes == expiries
    report.add(
        Row(
            "oauthrefresh",
            f"oauth: {result['sessions']} concurrent sessions sharing one refresh token, refreshes per expiry",
            round(per_expiry, 3),
            "refreshes/expiry",
            "1, with 0 races and 0 reuse detections",
            ok,
            f"({expiries} expiries in {len(ours)} rounds: {refreshes} refreshes, {races} races, {reuse} reuse"
            f" detections, {minted} tokens minted, {expiries - minted} failed; all {result['sessions']} renewed in"
            f" {statistics.median(r['all_renewed_s'] for r in ours):.2f} s (median per expiry, {DELAY * 1000:.0f} ms"
            f" per refresh at the server). The same processes without the host's lock, rounds alternating:"
            f" {_sum(without, 'races')} races, {_sum(without, 'reuse_detections')} reuse detections,"
            f" {_sum(without, 'minted')} of {_sum(without, 'expiries')} minted; load average"
            f" {result['load_average'][0]:.1f})",
            result,
        )
    )


def figure_oauth_refresh(settings: Settings, report: Report) -> None:
    work = Path(tempfile.mkdtemp(prefix="oauth-", dir=WORK if WORK.exists() else None))
    add_rows(run(work, 1 if settings.quick else 3, 2 if settings.quick else 3), report)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    report = Report()
    work = Path(tempfile.mkdtemp(prefix="oauth-refresh-"))
    add_rows(run(work, 1 if args.quick else 3, 2 if args.quick else 3), report)
    for row in report.rows:
        print(f"{row.name}: {row.shown_value()} {row.unit} ({'pass' if row.ok else 'MISS'}) {row.detail}")
    return 0 if all(row.ok is not False for row in report.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
