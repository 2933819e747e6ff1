"""The audit figures: build a million-record issuance log once, then time verify and lookup on it."""

from __future__ import annotations

import base64
import json
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import ACCOUNT, BROKER, RESULTS, ROOT, WORK, Report, Row, Settings, median, must, run, summary
from bench.local import base_env

# -- audit ---------------------------------------------------------------------------------

NEEDLE_SECRET = b"bench-needle-token-5f1c0ffee"
AUDIT_FORMAT = 3
WITNESS_EVERY = 1000  # one witness object per this many records (a witness_interval, in effect)


def audit_dir(records: int, every: int) -> Path:
    return RESULTS / f"audit-{records}-cp{every}"


def build_audit_log(records: int, every: int) -> tuple[Path, float, bool]:
    """The cached log (built when absent): (directory, build seconds, reused)."""
    directory = audit_dir(records, every)
    meta_path = directory / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("format") == AUDIT_FORMAT and meta.get("records") == records:
            return directory, float(meta.get("build_seconds", 0)), True
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    start = time.perf_counter()
    _write_audit_log(directory, records, every)
    seconds = time.perf_counter() - start
    meta_path.write_text(
        json.dumps(
            {"format": AUDIT_FORMAT, "records": records, "checkpoint_every": every, "build_seconds": round(seconds, 2)}
        )
    )
    return directory, seconds, False


def _write_audit_log(directory: Path, records: int, every: int) -> None:
    """Records as ``broker issue``/``revoke`` append them, chained and checkpointed as broker/audit/log.py does."""
    from broker.audit.keys import load_or_create_keys
    from broker.audit.log import GENESIS, canonical, checkpoint_message, record_hash
    from broker.vocab.secret import Secret

    keys = load_or_create_keys(directory / "audit.key", directory / "fingerprint.key")
    (directory / "broker.pub").write_text("\n".join(keys.public_key_lines()) + "\n")
    (directory / "broker.toml").write_text(
        f'state_dir = "{directory / "state"}"\nruntime_dir = "{WORK / "audit-run"}"\n'
        f'policy_dir = "{directory / "policies"}"\naudit_key = "{directory / "audit.key"}"\n'
    )
    from broker.core.store import open_store

    (directory / "state").mkdir(mode=0o700)
    open_store(directory / "state").close()  # where lookup notes the prefix it checked
    witnessed = open(directory / "witnessed.jsonl", "wb")  # noqa: SIM115 - closed below
    signer = keys.private_key()
    hmac_key = keys.fingerprints.hmac_key
    requester = "root(uid:0)"
    needle_session = records // 2 // 10
    clock = datetime(2026, 1, 1, tzinfo=UTC)
    prev, seq, session_no = GENESIS, 0, 0
    scopes = {
        "repo": (
            "github",
            "github_app",
            {"repositories": ["octo-org/widgets"], "permissions": {"contents": "write", "pull_requests": "write"}},
        ),
        "artifacts": (
            "aws",
            "aws_sts",
            {
                "role_arn": f"arn:aws:iam::{ACCOUNT}:role/agent-ci",
                "policy_arns": [],
                "session_policy": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::ci-artifacts/*"]}
                    ],
                },
            },
        ),
        "kv": ("vault", "vault", {"policies": ["ci-read"], "num_uses": 20}),
    }

    def stamp() -> str:
        return (clock + timedelta(milliseconds=seq * 37)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    with open(directory / "issuance.jsonl", "wb", buffering=8 << 20) as out:

        def append(event: str, session: str | None, task: str | None, fields: dict[str, Any]) -> None:
            """One record in the broker's own format (canonical JSON, hash chained to the previous)."""
            nonlocal prev, seq
            seq += 1
            record: dict[str, Any] = {
                "seq": seq,
                "time": stamp(),
                "event": event,
                "session": session,
                "task": task,
                "requester": requester,
                "prev": prev,
                **fields,
            }
            record["hash"] = record_hash(record)
            out.write(canonical(record) + b"\n")
            prev = record["hash"]
            if event == "checkpoint" and (seq // WITNESS_EVERY != (seq - 5) // WITNESS_EVERY or seq >= records):
                witnessed.write(canonical(record) + b"\n")  # the checkpoints a witness would hold

        def checkpoint() -> None:
            """A checkpoint signed over the head, as the broker appends at the end of a command."""
            signature = signer.sign(checkpoint_message(seq, prev))
            head = {
                "head_seq": seq,
                "head_hash": prev,
                "key_id": keys.key_id,
                "signature": base64.b64encode(signature).decode(),
            }
            append("checkpoint", None, None, head)

        def emit(event: str, session: str | None, task: str | None, fields: dict[str, Any]) -> None:
            append(event, session, task, fields)
            if every and seq % every == 0 and seq < records:
                checkpoint()

        def command_done() -> None:
            """``every`` 0: a checkpoint at the end of each command (issue, revoke), as a real log has."""
            if not every and seq < records:
                checkpoint()

        while seq < records:
            session_no += 1
            session = f"s-{session_no:012d}"[-14:]
            task = f"fix-build-{session_no % 977}"
            expires = (clock + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
            names = ("repo", "artifacts", "kv")
            for name in names:
                provider, kind, scope = scopes[name]
                secret = (
                    NEEDLE_SECRET
                    if (session_no == needle_session and name == "kv")
                    else (f"{session}/{name}/{session_no * 7919}".encode())
                )
                emit(
                    "credential.issued",
                    session,
                    task,
                    {
                        "credential": name,
                        "provider": provider,
                        "type": kind,
                        "rule": "agents-widgets",
                        "scope": scope,
                        "expires_at": expires,
                        "reference": {"id": f"{name}-{session_no}"},
                        "fingerprint": Secret(secret).fingerprint(hmac_key),
                        "fingerprint_key_id": keys.fingerprints.key_id,
                    },
                )
            emit(
                "session.issued",
                session,
                task,
                {"expires_at": expires, "credentials": list(names), "dir": f"/run/broker/{session}"},
            )
            command_done()
            for name in names:
                provider, kind, _ = scopes[name]
                emit(
                    "credential.revoked",
                    session,
                    task,
                    {
                        "credential": name,
                        "provider": provider,
                        "type": kind,
                        "reference": {"id": f"{name}-{session_no}"},
                        "reason": "revoke",
                        "outcome": "revoked",
                    },
                )
            emit(
                "session.revoked",
                session,
                task,
                {
                    "credentials": [{"name": n, "provider": scopes[n][0], "outcome": "revoked"} for n in names],
                    "dir_removed": True,
                },
            )
            command_done()
        checkpoint()  # the log ends with a checkpoint, as every broker command that appended leaves it
    witnessed.close()


def _witness_bucket(directory: Path, endpoint_url: str, env: dict[str, str]) -> str:
    """A bucket with Object Lock on the moto server, holding the witness objects of the log."""
    import boto3

    from broker.audit.witness import WitnessConfig, put_checkpoint
    from broker.vocab.time import utcnow

    s3 = boto3.client(
        "s3",
        region_name="us-east-1",
        endpoint_url=endpoint_url,
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    s3.create_bucket(Bucket="audit-witness", ObjectLockEnabledForBucket=True)
    witness = WitnessConfig("audit-witness", "broker", endpoint_url=endpoint_url, region="us-east-1")
    now = utcnow()
    with open(directory / "witnessed.jsonl", "rb") as handle:
        for line in handle:
            record = json.loads(line)
            put_checkpoint(s3, witness, int(record["seq"]), str(record["hash"]), line.rstrip(b"\n"), now)
    return witness.url


def figure_audit(settings: Settings, report: Report) -> None:
    import os
    import subprocess

    from bench.common import PYTHON
    from devstack.net import free_port, wait_http

    env = base_env()
    n, every = settings.audit_records, settings.audit_checkpoint_every
    print(f"     log of ~{n:,} records (a checkpoint {f'every {every}' if every else 'per command'}) ...", flush=True)
    directory, build, reused = build_audit_log(n, every)
    log = directory / "issuance.jsonl"
    lines = sum(1 for _ in open(log, "rb"))  # noqa: SIM115
    size_mib = log.stat().st_size / 2**20
    print(
        f"     {'reused' if reused else 'built'} {log} ({lines:,} records, {size_mib:.0f} MiB, build {build:.1f} s)",
        flush=True,
    )
    verify_cmd = [BROKER, "audit", "verify", "--log", str(log), "--public-key", str(directory / "broker.pub")]
    lookup_cmd = [
        BROKER,
        "--config",
        str(directory / "broker.toml"),
        "audit",
        "lookup",
        "--secret-stdin",
        "--log",
        str(log),
        "--json",
    ]
    must(run(verify_cmd, env=env), "audit verify (warm-up)")
    from broker.core.store import open_store

    store = open_store(directory / "state")
    store._conn.execute("DELETE FROM checked_prefix")  # the first lookup checks the whole chain
    store.close()
    cold_lookup = must(run(lookup_cmd, env=env, stdin=NEEDLE_SECRET), "audit lookup (cold)").seconds
    verify_s: list[float] = []
    lookup_s: list[float] = []
    found: list[int] = []
    for _ in range(settings.audit_reps):
        verify_s.append(must(run(verify_cmd, env=env), "audit verify").seconds)
        ran = must(run(lookup_cmd, env=env, stdin=NEEDLE_SECRET), "audit lookup")
        lookup_s.append(ran.seconds)
        found.append(len(json.loads(ran.stdout)))
    port = free_port()
    moto = subprocess.Popen(
        [PYTHON, "-m", "devstack.aws", str(port)], stdout=subprocess.DEVNULL, env={**os.environ, **env}, cwd=ROOT
    )
    witness_s: list[float] = []
    try:
        endpoint = f"http://127.0.0.1:{port}"
        wait_http(f"{endpoint}/moto-api/")
        objects = sum(1 for _ in open(directory / "witnessed.jsonl", "rb"))  # noqa: SIM115
        witness_url = _witness_bucket(directory, endpoint, env)
        witness_cmd = [*verify_cmd, "--witness", witness_url, "--witness-endpoint-url", endpoint]
        for _ in range(settings.audit_reps):
            ran = must(run(witness_cmd, env=env), "audit verify --witness")
            witness_s.append(ran.seconds)
    finally:
        moto.terminate()
        moto.wait(10)
    full = lines >= 1_000_000  # the goals are for 1M records; smaller logs (--quick) get no verdict
    verify = median(verify_s)
    rate = lines / verify
    meta = {
        "log": str(log),
        "records": lines,
        "mib": round(size_mib, 1),
        "build_seconds": build,
        "reused": reused,
        "checkpoint_every": every,
    }
    report.add(
        Row(
            "audit",
            f"audit verify: {lines:,} records, throughput",
            round(rate),
            "records/s",
            ">= 100,000 records/s",
            rate >= 100_000 if full else None,
            f"({verify:.2f} s total; goal 1M in < 10 s)",
            {**meta, "verify": summary(verify_s)},
        )
    )
    report.add(
        Row("audit", "audit verify: total", round(verify, 2), "s", "< 10 s at 1M", verify < 10 if full else None, "")
    )
    witness = median(witness_s)
    report.add(
        Row(
            "audit",
            f"audit verify --witness: {objects:,} objects on moto",
            round(witness, 2),
            "s",
            "< 20 s at 1M",
            witness < 20 if full else None,
            f"(one object per {WITNESS_EVERY:,} records)",
            {**meta, "witness_objects": objects, "verify_witness": summary(witness_s)},
        )
    )
    lookup = median(lookup_s)
    report.add(
        Row(
            "audit",
            f"audit lookup --secret-stdin: {lines:,} records",
            round(lookup, 2),
            "s",
            "< 2 s at 1M",
            (lookup < 2 and all(f == 1 for f in found)) if full else None,
            f"(chain checked: a noted prefix rehashed; matches found: {sorted(set(found))})",
            {**meta, "lookup": summary(lookup_s)},
        )
    )
    report.add(
        Row(
            "audit",
            "audit lookup, first on this log (whole chain checked)",
            round(cold_lookup, 2),
            "s",
            "",
            None,
            "(once per log copy; later lookups rehash the checked prefix)",
            meta,
        )
    )
