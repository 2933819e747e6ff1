"""Strict verification, attacked as someone who can write state_dir would: strip, forge a tail, truncate, edit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.audit.log import canonical, record_hash
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.openbao import VAULT_TASK

pytestmark = pytest.mark.server


@pytest.fixture
def log_env(vault_env: BrokerEnv) -> BrokerEnv:
    """Two live sessions, one revoked: several checkpoints."""
    task = vault_env.write_task(VAULT_TASK)
    sessions = [vault_env.run("issue", "--task", str(task), "--json").json()["session"] for _ in range(3)]
    assert vault_env.run("revoke", "--session", sessions[0]).code == 0
    return vault_env


def rechain(records: list[dict[str, object]]) -> str:
    """What a forger with write access does after editing: renumber, relink and rehash every record."""
    prev = "0" * 64
    out = []
    for seq, record in enumerate(records, start=1):
        record = {k: v for k, v in record.items() if k != "hash"}
        record["seq"], record["prev"] = seq, prev
        record["hash"] = prev = record_hash(record)
        out.append(canonical(record).decode() + "\n")
    return "".join(out)


def append_forged(env: BrokerEnv, record: dict[str, object]) -> dict[str, object]:
    last = env.log_records()[-1]
    forged = {**record, "seq": last["seq"] + 1, "prev": last["hash"], "time": last["time"], "requester": "root"}
    forged["hash"] = record_hash(forged)
    with open(env.log_path, "ab") as handle:
        handle.write(canonical(forged) + b"\n")
    return forged


def test_a_log_with_every_checkpoint_stripped_fails(log_env: BrokerEnv, tmp_path: Path) -> None:
    kept = [r for r in log_env.log_records() if r["event"] != "checkpoint"]
    copy = tmp_path / "stripped.jsonl"
    copy.write_text(rechain(kept))
    public = tmp_path / "broker.pub"
    public.write_text(log_env.run("audit", "public-key").stdout)
    result = log_env.run("audit", "verify", "--log", str(copy), "--public-key", str(public), "--json")
    assert result.code == 6
    assert result.json()["first_bad_seq"] == 1
    assert result.json()["reason"] == f"seq 1: unsigned tail: {len(kept)} record(s) and no signed checkpoint" + (
        " (checkpoints stripped or never written)"
    )


def test_a_forged_tail_is_counted_and_fails_strict(log_env: BrokerEnv) -> None:
    live = log_env.run("status", "--json").json()[0]["session"]
    forged = append_forged(
        log_env,
        {
            "event": "credential.revoked",
            "session": live,
            "task": "fix-build-7",
            "credential": "kv",
            "provider": "vault",
            "outcome": "revoked",
        },
    )
    lenient = log_env.run("audit", "verify", "--json")
    assert lenient.code == 0 and lenient.json()["unsigned_tail"] == 1
    assert "unsigned tail 1" in log_env.run("audit", "verify").stdout
    strict = log_env.run("audit", "verify", "--strict")
    assert strict.code == 6
    assert strict.stderr.startswith(f"broker: error: seq {forged['seq']}: unsigned tail: 1 record(s) after the newest")
    active = log_env.run("audit", "active", "--json")  # the forged revocation hides the credential, and says so
    assert "1 record(s) after the newest checkpoint are not signed" in active.stderr


def test_a_copy_truncated_to_an_earlier_checkpoint_fails_against_a_noted_head(
    log_env: BrokerEnv, tmp_path: Path
) -> None:
    records = log_env.log_records()
    head = f"{records[-1]['seq']}:{records[-1]['hash']}"  # what the auditor noted last time
    checkpoints = [index for index, r in enumerate(records) if r["event"] == "checkpoint"]
    copy = tmp_path / "copy.jsonl"
    copy.write_text("".join(canonical(r).decode() + "\n" for r in records[: checkpoints[1] + 1]))
    public = tmp_path / "broker.pub"
    public.write_text(log_env.run("audit", "public-key").stdout)
    offline = ["audit", "verify", "--log", str(copy), "--public-key", str(public)]
    assert log_env.run(*offline).code == 0  # on its own, a shorter log is a valid log
    result = log_env.run(*offline, "--expect-head", head)
    assert result.code == 6
    assert result.stderr.startswith(f"broker: error: seq {checkpoints[1] + 2}: truncated: the log ends at seq")
    rewritten = log_env.run(*offline, "--expect-head", f"{checkpoints[1] + 1}:{'0' * 64}")
    assert rewritten.code == 6 and f"seq {checkpoints[1] + 1}: edited: differs from the expected head" in (
        rewritten.stderr
    )
    assert log_env.run(*offline, "--expect-head", "12:nothex").code == 2
    assert log_env.run("audit", "verify", "--expect-head", head).code == 0


def test_active_and_lookup_refuse_a_broken_chain_unless_told_not_to_check(log_env: BrokerEnv, tmp_path: Path) -> None:
    live = log_env.run("status", "--json").json()[0]["session"]
    token = (log_env.runtime_dir / live / "kv" / "token").read_text()
    assert log_env.run("audit", "lookup", "--secret-stdin", stdin=token).code == 0  # checks, and notes the prefix
    items = log_env.log_path.read_text().splitlines(keepends=True)
    index = next(i for i, line in enumerate(items) if '"credential.issued"' in line and live in line)
    edited = json.loads(items[index])
    edited["task"] = "innocent-task"
    items[index] = canonical(edited).decode() + "\n"
    log_env.log_path.write_text("".join(items))
    for command in (["audit", "active"], ["audit", "lookup", "--secret-stdin"]):
        refused = log_env.run(*command, stdin=token)
        assert refused.code == 6, (command, refused.stdout, refused.stderr)
        assert refused.stderr.startswith(f"broker: error: seq {index + 1}: edited: ")
        assert log_env.run(*command, "--no-verify", stdin=token).code == 0


def test_a_public_key_file_that_is_a_fifo_fails_in_one_line_instead_of_hanging(
    log_env: BrokerEnv, tmp_path: Path
) -> None:
    """The auditor's key file is read with the one bounded reader: a FIFO there (nobody writing) is refused."""
    import os
    import subprocess

    fifo = tmp_path / "broker.pub"
    os.mkfifo(fifo)
    try:
        result = log_env.run_process("audit", "verify", "--log", str(log_env.log_path), "--public-key", str(fifo))
    except subprocess.TimeoutExpired:
        pytest.fail("audit verify hung reading a FIFO named as the public key file")
    assert result.code == 2 and result.stderr.startswith("broker: error: public key file")
    assert "Traceback" not in result.stderr


def test_a_leaked_secret_file_that_is_a_fifo_fails_in_one_line_instead_of_hanging(
    log_env: BrokerEnv, tmp_path: Path
) -> None:
    import os
    import subprocess

    fifo = tmp_path / "leaked.txt"
    os.mkfifo(fifo)
    try:
        result = log_env.run_process("audit", "lookup", "--secret-file", str(fifo))
    except subprocess.TimeoutExpired:
        pytest.fail("audit lookup hung reading a FIFO named as the leaked secret file")
    assert result.code == 2 and "is not a regular file" in result.stderr and "Traceback" not in result.stderr
