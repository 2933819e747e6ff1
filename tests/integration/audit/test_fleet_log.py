"""The fleet's issuance log: one hash chain in PostgreSQL for every host, checkpoints signed per host.

Several broker "hosts" (their own config, state, runtime dir and audit key)
share one real PostgreSQL store and the real OpenBao dev server; the
attacks edit the table directly, as anyone who can write the database can.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from broker.audit.keys import load_or_create_keys
from broker.audit.log import canonical, checkpoint_message, record_hash
from tests.fixtures.aws import WitnessBucket
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.fleet import FleetDb, create_fleet_db, new_host
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.postgres import Postgres

pytestmark = pytest.mark.server


@pytest.fixture
def fleet_db(postgres: Postgres, tmp_path: Path) -> FleetDb:
    return create_fleet_db(postgres, tmp_path)


@pytest.fixture
def hosts(tmp_path: Path, openbao: OpenBao, fleet_db: FleetDb) -> Iterator[tuple[BrokerEnv, BrokerEnv, BrokerEnv]]:
    envs = tuple(new_host(tmp_path, openbao, fleet_db, name) for name in ("host-a", "host-b", "host-c"))
    try:
        yield envs  # type: ignore[misc]
    finally:
        for env in envs:
            env.cleanup()


def issue(env: BrokerEnv) -> str:
    result = env.run("issue", "--task", str(env.write_task(VAULT_TASK)), "--json")
    assert result.code == 0, result.stderr
    return str(result.json()["session"])


def table(postgres: Postgres, db: FleetDb) -> list[dict[str, Any]]:
    rows = postgres_query(postgres, db, "SELECT record FROM issuance_log ORDER BY seq")
    return [json.loads(row[0]) for row in rows]


def postgres_query(postgres: Postgres, db: FleetDb, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(postgres.dsn(dbname=db.name), autocommit=True, connect_timeout=10) as conn:
        cursor = conn.execute(sql.encode(), params or None)
        return list(cursor.fetchall()) if cursor.description else []


def pin_keys(env: BrokerEnv) -> Path:
    """What an auditor pins: ``audit public-key`` of the fleet (every host's key, with its host)."""
    result = env.run("audit", "public-key")
    assert result.code == 0, result.stderr
    path = env.root / "fleet.pub"
    path.write_text(result.stdout)
    return path


def verify_in_place(env: BrokerEnv, db: FleetDb, pinned: Path, *extra: str) -> Any:
    return env.run("audit", "verify", "--store", db.url, "--public-key", str(pinned), *extra)


def append_forged(postgres: Postgres, db: FleetDb, fields: dict[str, Any], host: str) -> int:
    """Append a chain-correct record to the table, as a database writer without any host's key can."""
    seq, prev = postgres_query(postgres, db, "SELECT seq, hash FROM issuance_log ORDER BY seq DESC LIMIT 1")[0]
    record = {"seq": seq + 1, "time": "2026-11-30T00:00:00.000000Z", "session": None, "task": None}
    record |= {"requester": "root", "prev": prev, **fields}
    if record["event"] == "checkpoint":
        record |= {"head_seq": seq, "head_hash": prev}
    signer = record.pop("_signer", None)
    if signer is not None:
        record["signature"] = base64.b64encode(signer.private_key().sign(checkpoint_message(seq, prev))).decode()
    record["hash"] = record_hash(record)
    postgres_query(
        postgres,
        db,
        "INSERT INTO issuance_log (seq, hash, host, record) VALUES (%s, %s, %s, %s)",
        seq + 1,
        record["hash"],
        host,
        canonical(record).decode(),
    )
    return int(seq) + 1


# -- one chain for the fleet -----------------------------------------------------------------


def test_hosts_write_one_chain_that_verifies_in_place_and_after_export(
    hosts: tuple[BrokerEnv, BrokerEnv, BrokerEnv], fleet_db: FleetDb, postgres: Postgres
) -> None:
    a, b, _ = hosts
    first = issue(a)
    issue(b)
    assert b.run("revoke", "--session", first).code == 0
    records = table(postgres, fleet_db)
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    checkpoints = [r for r in records if r["event"] == "checkpoint"]
    assert [c["host"] for c in checkpoints] == ["host-a", "host-b", "host-b"]
    assert not a.log_path.exists() and not b.log_path.exists()  # no per-host file in fleet mode
    pinned = pin_keys(a)
    hosts_listed = sorted(line.split()[1] for line in pinned.read_text().splitlines())
    assert hosts_listed == ["host-a", "host-b"]
    result = verify_in_place(a, fleet_db, pinned, "--strict", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["records"] == len(records) and result.json()["checkpoints"] == 3
    exported = a.root / "issuance.jsonl"
    result = a.run("audit", "export", "--output", str(exported))
    assert result.code == 0, result.stderr
    assert exported.stat().st_mode & 0o777 == 0o600
    assert exported.read_bytes() == b"".join(canonical(r) + b"\n" for r in records)  # byte for byte
    offline = a.run("audit", "verify", "--log", str(exported), "--public-key", str(pinned), "--strict")
    assert offline.code == 0, offline.stderr
    assert offline.stdout.startswith(f"ok: {len(records)} records, 3 checkpoints")
    to_stdout = b.run("audit", "export")
    assert to_stdout.code == 0 and to_stdout.stdout.encode() == exported.read_bytes()


def test_list_and_lookup_on_one_host_read_what_every_host_wrote(
    hosts: tuple[BrokerEnv, BrokerEnv, BrokerEnv], openbao: OpenBao
) -> None:
    a, b, c = hosts
    issue(c)  # host-c keeps its own fingerprint key
    document = a.run("issue", "--task", str(a.write_task(VAULT_TASK)), "--json").json()
    session = document["session"]
    shutil.copy2(a.root / "fingerprint.key", b.root / "fingerprint.key")  # one fingerprint key for the fleet
    listed = b.run("audit", "list", "--session", session, "--json")
    assert listed.code == 0, listed.stderr
    events = [json.loads(line)["event"] for line in listed.stdout.splitlines()]
    assert "credential.issued" in events and "session.issued" in events
    leaked = b.write_secret("leaked", (Path(str(document["dir"])) / "kv" / "token").read_text())
    found = b.run("audit", "lookup", "--secret-file", str(leaked), "--json")
    assert found.code == 0, found.stderr
    assert [m["session"] for m in found.json()] == [session]
    assert "fingerprints made with 1 key(s) this host does not hold" in found.stderr


def test_three_hosts_issuing_at_once_give_one_gapless_chain(
    hosts: tuple[BrokerEnv, BrokerEnv, BrokerEnv], fleet_db: FleetDb, postgres: Postgres
) -> None:
    def issue_many(env: BrokerEnv) -> list[int]:
        """One process per host issuing 20 sessions one after another (the hosts run at once)."""
        args = ["--config", str(env.config_path), "issue", "--task", str(env.write_task(VAULT_TASK))]
        program = f"from broker.cli.app import main; print([main({args!r}) for _ in range(20)])"
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        return list(json.loads(done.stdout.strip().splitlines()[-1]))

    with ThreadPoolExecutor(len(hosts)) as pool:
        codes = [code for result in pool.map(issue_many, hosts) for code in result]
    assert codes == [0] * 60
    records = table(postgres, fleet_db)
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert sum(r["event"] == "session.issued" for r in records) == 60
    assert {r["host"] for r in records if r["event"] == "checkpoint"} == {"host-a", "host-b", "host-c"}
    result = verify_in_place(hosts[0], fleet_db, pin_keys(hosts[0]), "--strict")
    assert result.code == 0, result.stderr


# -- attacks on the table --------------------------------------------------------------------


def test_a_record_edited_or_deleted_in_the_table_is_named_by_seq(
    hosts: tuple[BrokerEnv, BrokerEnv, BrokerEnv], fleet_db: FleetDb, postgres: Postgres
) -> None:
    a, b, _ = hosts
    issue(a)
    issue(b)
    pinned = pin_keys(a)
    assert verify_in_place(a, fleet_db, pinned).code == 0
    edited = "UPDATE issuance_log SET record = replace(record, '\"fix-build-7\"', '\"other-task\"') WHERE seq = 2"
    postgres_query(postgres, fleet_db, edited)
    result = verify_in_place(a, fleet_db, pinned, "--json")
    assert result.code == 6
    assert result.json()["first_bad_seq"] == 2 and "edited" in result.json()["reason"]
    postgres_query(postgres, fleet_db, "UPDATE issuance_log SET record = replace(record, 'other-task', 'fix-build-7')")
    assert verify_in_place(a, fleet_db, pinned).code == 0
    postgres_query(postgres, fleet_db, "DELETE FROM issuance_log WHERE seq = 3")
    result = verify_in_place(a, fleet_db, pinned)
    assert result.code == 6 and "seq 3: deleted" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_checkpoint_signed_by_a_key_the_auditor_did_not_pin_fails(
    hosts: tuple[BrokerEnv, BrokerEnv, BrokerEnv], fleet_db: FleetDb, postgres: Postgres, tmp_path: Path
) -> None:
    a = hosts[0]
    issue(a)
    pinned = pin_keys(a)
    rogue = load_or_create_keys(tmp_path / "rogue.key", tmp_path / "rogue.fp")
    public = "ed25519:" + base64.b64encode(rogue.signing.public_raw()).decode()
    postgres_query(
        postgres,
        fleet_db,
        "INSERT INTO audit_keys (key_id, host, public_key) VALUES (%s, %s, %s)",
        rogue.key_id,
        "host-a",
        public,
    )  # the database writer lists its key too
    seq = append_forged(
        postgres,
        fleet_db,
        {"event": "checkpoint", "host": "host-a", "key_id": rogue.key_id, "_signer": rogue},
        "host-a",
    )
    unpinned = a.run("audit", "verify", "--store", fleet_db.url)
    assert unpinned.code == 0  # the store's own listing is fooled, and the note says so
    assert "pin them with --public-key" in unpinned.stderr
    result = verify_in_place(a, fleet_db, pinned)
    assert result.code == 6 and f"seq {seq}: bad signature: checkpoint signed by unknown key" in result.stderr


def test_a_checkpoint_of_one_host_signed_with_another_hosts_key_or_forged_fails(
    hosts: tuple[BrokerEnv, BrokerEnv, BrokerEnv], fleet_db: FleetDb, postgres: Postgres
) -> None:
    a, b, _ = hosts
    issue(a)
    issue(b)
    pinned = pin_keys(a)
    b_keys = load_or_create_keys(b.root / "audit.key", b.root / "fingerprint.key")
    fields = {"event": "checkpoint", "host": "host-a", "key_id": b_keys.key_id, "_signer": b_keys}
    seq = append_forged(postgres, fleet_db, fields, "host-a")
    result = verify_in_place(a, fleet_db, pinned)
    assert (
        result.code == 6
        and f"seq {seq}: bad signature: checkpoint of host host-a signed by the key of host-b" in result.stderr
    )
    postgres_query(postgres, fleet_db, "DELETE FROM issuance_log WHERE seq = %s", seq)
    a_keys = load_or_create_keys(a.root / "audit.key", a.root / "fingerprint.key")
    fields = {"event": "checkpoint", "host": "host-a", "key_id": a_keys.key_id, "signature": "AAAA"}
    seq = append_forged(postgres, fleet_db, fields, "host-a")
    issue(b)  # a real host signs over the forgery afterwards: the forged checkpoint still fails on its own
    result = verify_in_place(a, fleet_db, pinned)
    assert result.code == 6 and f"seq {seq}: bad signature" in result.stderr


# -- the witness, errors ---------------------------------------------------------------------


def test_the_witness_covers_the_fleet_chain(
    hosts: tuple[BrokerEnv, BrokerEnv, BrokerEnv], fleet_db: FleetDb, postgres: Postgres, witness_bucket: WitnessBucket
) -> None:
    for env in hosts[:2]:
        env.tables["audit"] = {"witness": witness_bucket.url, "witness_endpoint_url": witness_bucket.endpoint_url}
        env.write_config()
    issue(hosts[0])
    issue(hosts[1])
    records = table(postgres, fleet_db)
    answer = witness_bucket.client().list_object_versions(Bucket=witness_bucket.bucket, Prefix="broker-audit/")
    stored = {item["Key"] for item in answer.get("Versions", [])}
    assert stored == {f"broker-audit/{r['seq']:020d}-{r['hash']}.json" for r in records if r["event"] == "checkpoint"}
    pinned = pin_keys(hosts[0])
    result = verify_in_place(hosts[0], fleet_db, pinned, "--witness", witness_bucket.url)
    assert result.code == 0, result.stderr
    assert result.stdout.rstrip().endswith(", 2 witness object(s) matched")
    last = records[-1]["seq"]
    postgres_query(
        postgres, fleet_db, "DELETE FROM issuance_log WHERE seq >= %s", last - 1
    )  # the newest command erased
    result = verify_in_place(hosts[0], fleet_db, pinned, "--witness", witness_bucket.url)
    assert result.code == 6 and "truncated" in result.stderr


def test_store_errors_are_one_line_without_the_password(
    hosts: tuple[BrokerEnv, BrokerEnv, BrokerEnv], postgres: Postgres
) -> None:
    a = hosts[0]
    with_password = f"postgresql://postgres:{postgres.password}@{postgres.host}:{postgres.port}/postgres"
    result = a.run("audit", "verify", "--store", with_password)
    assert result.code == 2 and postgres.password not in result.stderr + result.stdout
    assert result.stderr.startswith("broker: error: --store: no password in the URL")
    missing = f"postgresql://postgres@{postgres.host}:{postgres.port}/no_such_db"
    for command in (("audit", "verify", "--store", missing), ("audit", "export", "--store", missing)):
        result = a.run(*command)
        assert result.code != 0 and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and postgres.password not in result.stderr
        assert "issuance log postgresql://postgres@" in result.stderr


def test_egress_request_records_batched_into_the_fleet_chain_interleave_with_other_hosts_and_verify(
    hosts: tuple[BrokerEnv, BrokerEnv, BrokerEnv], fleet_db: FleetDb, postgres: Postgres
) -> None:
    """A session proxy's evidence writer appends its records in batches (one transaction each) while another
    host issues: one gapless chain, every record there once, and the pinned keys verify it in place."""
    from broker.core.broker import Broker
    from broker.core.inputs.config import load_config
    from broker.egress.evidence.writer import EvidenceWriter

    a, b, _ = hosts
    broker = Broker.open(load_config(a.config_path))
    writer = EvidenceWriter(broker.log, session="s-aaaaaaaaaaaa", task="fix-build-7", requester="root", max_batch=7)
    try:
        for number in range(60):
            writer.submit({"host": "api.github.com:443", "path": f"/issues/{number}", "decision": "allowed"})
            if number % 20 == 0:
                issue(b)
        assert writer.close() == 0
        assert writer.batches > 1
        broker.checkpoint()
    finally:
        broker.store.close()
    records = table(postgres, fleet_db)
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    paths = [r["path"] for r in records if r["event"] == "egress.request"]
    assert paths == [f"/issues/{n}" for n in range(60)]
    verified = verify_in_place(a, fleet_db, pin_keys(a))
    assert verified.code == 0, verified.stderr
