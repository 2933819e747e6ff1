"""The witness: checkpoints in an Object Lock (COMPLIANCE) bucket catch what a host writer can do to the log.

Against the moto server: every checkpoint becomes a locked object; a log
rewritten under fresh keys (with the store's head rewritten too) verifies
locally and fails only against the witness; an outage loses nothing.
"""

from __future__ import annotations

import base64
import sqlite3
from typing import Any

import pytest

from broker.audit.keys import load_or_create_keys
from broker.audit.log import GENESIS, canonical, checkpoint_message, record_hash
from tests.fixtures.aws import WitnessBucket
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.openbao import VAULT_TASK

pytestmark = pytest.mark.server


@pytest.fixture
def witnessed_env(vault_env: BrokerEnv, witness_bucket: WitnessBucket) -> BrokerEnv:
    vault_env.tables["audit"] = {"witness": witness_bucket.url, "witness_endpoint_url": witness_bucket.endpoint_url}
    vault_env.write_config()
    return vault_env


def objects(bucket: WitnessBucket) -> dict[str, dict[str, Any]]:
    answer = bucket.client().list_object_versions(Bucket=bucket.bucket, Prefix="broker-audit/")
    return {item["Key"]: item for item in answer.get("Versions", [])}


def checkpoint_keys(env: BrokerEnv) -> set[str]:
    return {f"broker-audit/{r['seq']:020d}-{r['hash']}.json" for r in env.log_records() if r["event"] == "checkpoint"}


def issue_some(env: BrokerEnv, count: int) -> list[str]:
    task = env.write_task(VAULT_TASK)
    sessions = []
    for _ in range(count):
        result = env.run("issue", "--task", str(task), "--json")
        assert result.code == 0, result.stderr
        sessions.append(result.json()["session"])
    return sessions


def verify_witness(env: BrokerEnv, bucket: WitnessBucket, *extra: str) -> Any:
    return env.run("audit", "verify", "--witness", bucket.url, *extra)


def test_every_checkpoint_is_a_compliance_locked_object(
    witnessed_env: BrokerEnv, witness_bucket: WitnessBucket
) -> None:
    sessions = issue_some(witnessed_env, 2)
    assert witnessed_env.run("revoke", "--session", sessions[0]).code == 0
    stored = objects(witness_bucket)
    assert set(stored) == checkpoint_keys(witnessed_env) and len(stored) == 3
    s3 = witness_bucket.client()
    key, item = next(iter(stored.items()))
    head = s3.head_object(Bucket=witness_bucket.bucket, Key=key)
    assert head["ObjectLockMode"] == "COMPLIANCE"
    with pytest.raises(Exception, match="AccessDenied|locked|retention"):
        s3.delete_object(Bucket=witness_bucket.bucket, Key=key, VersionId=item["VersionId"])
    body = s3.get_object(Bucket=witness_bucket.bucket, Key=key)["Body"].read()
    assert body.decode() in witnessed_env.log_path.read_text()  # the checkpoint record itself
    result = verify_witness(witnessed_env, witness_bucket)
    assert result.code == 0, result.stderr
    assert result.stdout.rstrip().endswith(", 3 witness object(s) matched")


def forge(env: BrokerEnv, records: list[dict[str, Any]]) -> None:
    """Rewrite the whole log under fresh keys, re-sign every checkpoint, and set the store's head to match."""
    for name in ("audit.key", "fingerprint.key"):
        (env.root / name).unlink()
    keys = load_or_create_keys(env.root / "audit.key", env.root / "fingerprint.key")
    prev, lines = GENESIS, []
    for seq, original in enumerate(records, start=1):
        record = {k: v for k, v in original.items() if k != "hash"}
        record["seq"], record["prev"] = seq, prev
        if record["event"] == "checkpoint":
            signature = keys.private_key().sign(checkpoint_message(seq - 1, prev))
            record.update(head_seq=seq - 1, head_hash=prev, key_id=keys.key_id)
            record["signature"] = base64.b64encode(signature).decode()
        record["hash"] = prev = record_hash(record)
        lines.append(canonical(record) + b"\n")
    env.log_path.write_bytes(b"".join(lines))
    with sqlite3.connect(env.state_dir / "sessions.db") as db:
        db.execute("UPDATE log_head SET seq=?, hash=? WHERE id=1", (len(records), prev))


def test_a_log_rewritten_under_fresh_keys_is_caught_by_the_witness_alone(
    witnessed_env: BrokerEnv, witness_bucket: WitnessBucket
) -> None:
    sessions = issue_some(witnessed_env, 3)
    records = witnessed_env.log_records()
    hidden = [r for r in records if r.get("session") != sessions[1]]  # one session's credentials erased
    forge(witnessed_env, hidden)
    local = witnessed_env.run("audit", "verify", "--strict")
    assert local.code == 0, local.stderr  # every local key and file agrees with the forgery
    result = verify_witness(witnessed_env, witness_bucket)
    assert result.code == 6
    assert ": witness mismatch: the witness holds another record at this seq" in result.stderr
    as_json = verify_witness(witnessed_env, witness_bucket, "--json").json()
    first_checkpoint = next(r["seq"] for r in records if r["event"] == "checkpoint")
    assert as_json["ok"] is False and as_json["first_bad_seq"] == first_checkpoint  # re-signed: another hash


def test_a_log_truncated_to_an_earlier_checkpoint_is_caught_by_the_witness(
    witnessed_env: BrokerEnv, witness_bucket: WitnessBucket
) -> None:
    issue_some(witnessed_env, 3)
    records = witnessed_env.log_records()
    first_checkpoint = next(index for index, r in enumerate(records) if r["event"] == "checkpoint")
    kept = records[: first_checkpoint + 1]
    witnessed_env.log_path.write_bytes(b"".join(canonical(r) + b"\n" for r in kept))
    with sqlite3.connect(witnessed_env.state_dir / "sessions.db") as db:
        db.execute("UPDATE log_head SET seq=?, hash=? WHERE id=1", (kept[-1]["seq"], kept[-1]["hash"]))
    assert witnessed_env.run("audit", "verify", "--strict").code == 0
    result = verify_witness(witnessed_env, witness_bucket)
    assert result.code == 6
    assert result.stderr.startswith(f"broker: error: seq {len(kept) + 1}: truncated: the log ends at seq {len(kept)}")


def test_an_extra_object_naming_another_record_is_a_mismatch(
    witnessed_env: BrokerEnv, witness_bucket: WitnessBucket
) -> None:
    issue_some(witnessed_env, 1)
    checkpoint = witnessed_env.log_records()[-1]
    witness_bucket.client().put_object(
        Bucket=witness_bucket.bucket, Key=f"broker-audit/{checkpoint['seq']:020d}-{'f' * 64}.json", Body=b"{}"
    )
    result = verify_witness(witnessed_env, witness_bucket)
    assert result.code == 6 and f"seq {checkpoint['seq']}: witness mismatch" in result.stderr


def test_a_witness_outage_during_20_issues_loses_no_checkpoint(
    witnessed_env: BrokerEnv, witness_bucket: WitnessBucket
) -> None:
    witnessed_env.tables["audit"]["witness_endpoint_url"] = "http://127.0.0.1:9"  # nothing listens there
    witnessed_env.write_config()
    issue_some(witnessed_env, 20)  # issuing goes on during the outage
    assert objects(witness_bucket) == {}
    doctor = witnessed_env.run("doctor", "--json").json()
    [lag] = [c for c in doctor["checks"] if c["name"] == "witness.lag"]
    assert not lag["ok"] and lag["detail"].startswith("20 checkpoint(s) not witnessed yet")
    assert "last error" in lag["detail"]

    witnessed_env.tables["audit"]["witness_endpoint_url"] = witness_bucket.endpoint_url  # the witness is back
    witnessed_env.write_config()
    swept = witnessed_env.run("sweep", "--json")
    assert swept.json()["witness_pending"] == 0
    assert set(objects(witness_bucket)) == checkpoint_keys(witnessed_env)
    assert len(checkpoint_keys(witnessed_env)) == 20  # one per issue
    doctor = witnessed_env.run("doctor", "--json").json()
    [lag] = [c for c in doctor["checks"] if c["name"] == "witness.lag"]
    assert lag["ok"], lag
    result = verify_witness(witnessed_env, witness_bucket)
    assert result.code == 0 and "20 witness object(s) matched" in result.stdout


def test_with_an_interval_only_the_newest_checkpoint_waits(
    witnessed_env: BrokerEnv, witness_bucket: WitnessBucket
) -> None:
    witnessed_env.tables["audit"]["witness_interval"] = "1h"
    witnessed_env.write_config()
    issue_some(witnessed_env, 3)
    stored = objects(witness_bucket)
    assert len(stored) == 1  # the first checkpoint at once; the next ones wait for the interval
    with sqlite3.connect(witnessed_env.state_dir / "sessions.db") as db:
        pending = db.execute("SELECT seq FROM witness_pending").fetchall()
    assert pending == [(witnessed_env.log_records()[-1]["seq"],)]  # only the newest is kept
    assert verify_witness(witnessed_env, witness_bucket).code == 0
