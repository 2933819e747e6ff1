"""The fleet log figure: a million-record fleet chain loaded into PostgreSQL, then ``audit export`` + ``verify``.

The chain is what three hosts sharing a store write: per command the
records of an issue (three credentials and the session) or a revoke, then a
checkpoint signed by that host's own key with its ``host`` field, in the
format of ``broker/audit/pglog.py``. It is generated once (cached under
``bench-results/``) as COPY text and loaded with COPY into a fresh
database of a throw-away PostgreSQL server; then ``broker audit export
--store URL --output FILE`` and ``broker audit verify --log FILE
--public-key KEYS`` run as an auditor would, timed together (goal: < 30 s).
Also timed, without a goal: ``audit verify --store URL`` in place.
Runs alone too: ``python -m bench --only fleetlog``.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import BROKER, RESULTS, WORK, Report, Row, Settings, median, must, run
from bench.local import base_env

FORMAT = 1
HOSTS = ("host-a", "host-b", "host-c")
GOAL_SECONDS = 30.0


def _escape(text: bytes) -> bytes:
    """A value in COPY's text format (canonical JSON holds no raw tab or newline; backslashes double)."""
    return text.replace(b"\\", b"\\\\")


def build_chain(records: int) -> tuple[Path, float, bool]:
    """The cached chain as COPY rows and the hosts' public keys: (directory, build seconds, reused)."""
    directory = RESULTS / f"fleetlog-{records}"
    meta_path = directory / "meta.json"
    if meta_path.exists() and json.loads(meta_path.read_text()).get("format") == FORMAT:
        return directory, float(json.loads(meta_path.read_text())["build_seconds"]), True
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    start = time.perf_counter()
    _write_chain(directory, records)
    seconds = time.perf_counter() - start
    meta_path.write_text(json.dumps({"format": FORMAT, "records": records, "build_seconds": round(seconds, 2)}))
    return directory, seconds, False


def _write_chain(directory: Path, records: int) -> None:
    from broker.audit.keys import load_or_create_keys
    from broker.audit.log import GENESIS, canonical, checkpoint_fields, record_hash

    keys = {h: load_or_create_keys(directory / f"{h}.key", directory / f"{h}.fp") for h in HOSTS}
    pinned = [f"ed25519:{base64.b64encode(k.signing.public_raw()).decode()} {h}" for h, k in keys.items()]
    (directory / "fleet.pub").write_text("\n".join(pinned) + "\n")
    listed = [f"{k.key_id}\t{h}\t{line.split()[0]}" for (h, k), line in zip(keys.items(), pinned, strict=True)]
    (directory / "keys.copy").write_text("\n".join(listed) + "\n")
    clock = datetime(2026, 1, 1, tzinfo=UTC)
    prev, seq, command = GENESIS, 0, 0
    with open(directory / "log.copy", "wb", buffering=8 << 20) as out:

        def append(host: str, event: str, session: str | None, fields: dict[str, Any]) -> None:
            nonlocal prev, seq
            seq += 1
            record: dict[str, Any] = {
                "seq": seq,
                "time": (clock + timedelta(milliseconds=seq * 37)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "event": event,
                "session": session,
                "task": None if session is None else f"fix-build-{command % 977}",
                "requester": "agent(uid:1000)",
                "prev": prev,
                **fields,
            }
            record["hash"] = prev = record_hash(record)
            out.write(b"%d\t%s\t%s\t%s\n" % (seq, prev.encode(), host.encode(), _escape(canonical(record))))

        while seq < records:
            command += 1
            host = HOSTS[command % len(HOSTS)]
            session = f"s-{command // 2:012d}"
            names = ("repo", "artifacts", "kv")
            if command % 2:
                for name in names:
                    fields = {"credential": name, "provider": name, "type": "vault", "scope": {"policies": ["ci"]}}
                    fields |= {"expires_at": "2026-01-01T00:30:00Z", "reference": {"id": f"{name}-{command}"}}
                    fields |= {"fingerprint": f"hmac-sha256:{command:064x}", "fingerprint_key_id": "hmac-sha256:0"}
                    append(host, "credential.issued", session, fields)
                append(host, "session.issued", session, {"credentials": list(names), "dir": f"/run/b/{session}"})
            else:
                for name in names:
                    append(host, "credential.revoked", session, {"credential": name, "outcome": "revoked"})
                append(host, "session.revoked", session, {"dir_removed": True})
            append(host, "checkpoint", None, {"host": host, **checkpoint_fields(keys[host], seq, prev)})


def _load(directory: Path, url: str, passfile: Path) -> float:
    """A fresh schema (the broker's own migrations), then COPY of the chain and the keys; seconds taken."""
    import psycopg

    from broker.core.store.postgres.store import PostgresSessionStore

    PostgresSessionStore(url, host="bench", passfile=passfile).close()
    start = time.perf_counter()
    with psycopg.connect(url, passfile=str(passfile)) as conn, conn.cursor() as cursor:
        for table, columns, name in (
            ("issuance_log", "seq, hash, host, record", "log.copy"),
            ("audit_keys", "key_id, host, public_key", "keys.copy"),
        ):
            with (
                cursor.copy(f"COPY {table} ({columns}) FROM STDIN".encode()) as copy,
                open(directory / name, "rb") as src,
            ):
                while chunk := src.read(8 << 20):
                    copy.write(chunk)
    return time.perf_counter() - start


def figure_fleet_log(settings: Settings, report: Report) -> None:
    from devstack.postgres import create_fleet_db, server_bin_dir, start_postgres, stop_postgres

    if server_bin_dir() is None:
        raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) and no pgserver wheel")
    n = settings.audit_records
    print(f"     fleet chain of ~{n:,} records (3 hosts, a checkpoint per command) ...", flush=True)
    directory, build, reused = build_chain(n)
    print(f"     {'reused' if reused else 'built'} {directory} (build {build:.1f} s)", flush=True)
    postgres = start_postgres()
    try:
        folder = WORK / "fleetlog"
        folder.mkdir(parents=True, exist_ok=True)
        db = create_fleet_db(postgres, folder)
        loaded = _load(directory, db.url, db.passfile)
        env = {**base_env(), "PGPASSFILE": str(db.passfile)}
        exported, pub = folder / "issuance.jsonl", str(directory / "fleet.pub")
        export_cmd = [BROKER, "audit", "export", "--store", db.url, "--output", str(exported)]
        verify_cmd = [BROKER, "audit", "verify", "--log", str(exported), "--public-key", pub, "--strict"]
        in_place_cmd = [BROKER, "audit", "verify", "--store", db.url, "--public-key", pub, "--strict"]
        totals, exports, verifies, in_place, cpu = [], [], [], [], []
        for _ in range(1 if settings.quick else 3):
            exported.unlink(missing_ok=True)
            start = time.perf_counter()
            dumped = must(run(export_cmd, env=env), "audit export")
            middle = time.perf_counter()
            verified = must(run(verify_cmd, env=env), "audit verify of the export")
            end = time.perf_counter()
            cpu.append(dumped.cpu + verified.cpu)
            exports.append(middle - start)
            verifies.append(end - middle)
            totals.append(end - start)
            start = time.perf_counter()
            must(run(in_place_cmd, env=env), "audit verify --store")
            in_place.append(time.perf_counter() - start)
        size = exported.stat().st_size / 2**20
        detail = (
            f"{n:,} records ({size:.0f} MiB) loaded by COPY in {loaded:.1f} s; export {median(exports):.1f} s"
            f" + verify {median(verifies):.1f} s (CPU of both {median(cpu):.1f} s);"
            f" {verified.stdout.decode().strip()[:120]}"
        )
        total = median(totals)
        report.add(
            Row(
                "fleetlog",
                "fleet log export + verify",
                round(total, 2),
                "s",
                f"< {GOAL_SECONDS:.0f} s",
                total < GOAL_SECONDS,
                detail,
                {"runs": totals, "cpu": cpu, "load_seconds": loaded, "records": n},
            )
        )
        report.add(
            Row(
                "fleetlog",
                "fleet log verify --store (in place)",
                round(median(in_place), 2),
                "s",
                "",
                None,
                "streamed through a server-side cursor",
                {"runs": in_place},
            )
        )
    finally:
        stop_postgres(postgres)
