"""Auditor commands on real logs written by real issue/revoke runs: verify, tampering, list, lookup, active."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.audit.log import record_hash
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.openbao import VAULT_TASK

pytestmark = pytest.mark.server


@pytest.fixture
def busy_log(vault_env: BrokerEnv) -> BrokerEnv:
    """Three issued sessions, one revoked, one denial: a log with several checkpoints."""
    task = vault_env.write_task(VAULT_TASK)
    sessions = [vault_env.run("issue", "--task", str(task), "--json").json()["session"] for _ in range(3)]
    assert vault_env.run("revoke", "--session", sessions[0]).code == 0
    denied = vault_env.write_task(VAULT_TASK.replace("[ci-read]", "[prod]"), "denied.yaml")
    assert vault_env.run("issue", "--task", str(denied)).code == 3
    return vault_env


def lines(env: BrokerEnv) -> list[str]:
    return env.log_path.read_text().splitlines(keepends=True)


def write(env: BrokerEnv, items: list[str]) -> None:
    env.log_path.write_text("".join(items))


def rehash_from(items: list[str], start: int) -> list[str]:
    """What a careful forger does: recompute every hash and prev from ``start`` on."""
    records = [json.loads(line) for line in items]
    for index in range(start, len(records)):
        if index > 0:
            records[index]["prev"] = records[index - 1]["hash"]
        if records[index]["event"] == "checkpoint":
            records[index]["head_hash"] = records[index]["prev"]
        records[index]["hash"] = record_hash(records[index])
    return [json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records]


def test_a_real_log_verifies(busy_log: BrokerEnv) -> None:
    result = busy_log.run("audit", "verify", "--json")
    assert result.code == 0, result.stderr
    summary = result.json()
    assert summary["records"] == len(lines(busy_log))
    assert summary["signed_seq"] == summary["records"] - 1  # the last record is a checkpoint
    checkpoints = sum(1 for r in busy_log.log_records() if r["event"] == "checkpoint")
    assert {k: summary[k] for k in ("ok", "checkpoints", "unsigned_tail", "first_bad_seq", "reason")} == {
        "ok": True,
        "checkpoints": checkpoints,
        "unsigned_tail": 0,
        "first_bad_seq": None,
        "reason": None,
    }
    human = busy_log.run("audit", "verify")
    assert human.stdout == (
        f"ok: {summary['records']} records, {checkpoints} checkpoints (newest signs seq {summary['signed_seq']},"
        f" {summary['signed_hash'][:16]}...), 1 signing key(s) seen, unsigned tail 0\n"
    )


def test_offline_verification_with_the_public_key_alone(busy_log: BrokerEnv, tmp_path: Path) -> None:
    public = tmp_path / "broker.pub"
    public.write_text(busy_log.run("audit", "public-key").stdout)
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(busy_log.log_path.read_bytes())
    from broker.cli.app import main

    assert (
        main(["--config", "/nonexistent.toml", "audit", "verify", "--log", str(copy), "--public-key", str(public)]) == 0
    )
    other = tmp_path / "other.pub"
    other.write_text("ed25519:" + "A" * 43 + "=\n")
    assert main(["audit", "verify", "--log", str(copy), "--public-key", str(other)]) == 6


def tamper_cases(items: list[str]) -> dict[str, tuple[list[str], int, str]]:
    """name -> (tampered lines, first bad seq, the kind of damage verify names)."""
    second = json.loads(items[1])
    edited = dict(second, task="innocent-task")
    cases = {
        "edited": (
            items[:1] + [json.dumps(edited, sort_keys=True, separators=(",", ":")) + "\n"] + items[2:],
            2,
            "edited",
        ),
        "edited-and-rehashed": (
            rehash_from(items[:1] + [json.dumps(edited, sort_keys=True, separators=(",", ":")) + "\n"] + items[2:], 1),
            3,
            "bad signature",
        ),
        "deleted": (items[:1] + items[2:], 2, "deleted"),
        "inserted": (items[:2] + [items[1]] + items[2:], 3, "inserted"),
        "reordered": (items[:1] + [items[2], items[1]] + items[3:], 2, "reordered"),
        "not-json": (items[:1] + ["this is not json\n"] + items[2:], 2, "edited"),
    }
    return cases


@pytest.mark.parametrize("kind", ["edited", "edited-and-rehashed", "deleted", "inserted", "reordered", "not-json"])
def test_every_tamper_kind_fails_naming_the_first_bad_seq(busy_log: BrokerEnv, kind: str) -> None:
    tampered, bad_seq, damage = tamper_cases(lines(busy_log))[kind]
    write(busy_log, tampered)
    result = busy_log.run("audit", "verify")
    assert result.code == 6, (kind, result.stderr)
    assert result.stderr.startswith(f"broker: error: seq {bad_seq}: {damage}: "), (kind, result.stderr)
    assert result.stderr.count("\n") == 1
    as_json = busy_log.run("audit", "verify", "--json")
    assert as_json.code == 6
    assert {k: as_json.json()[k] for k in ("ok", "first_bad_seq")} == {"ok": False, "first_bad_seq": bad_seq}
    assert as_json.json()["reason"].startswith(f"seq {bad_seq}: {damage}: ")


def test_a_truncated_tail_is_caught_against_the_session_store(busy_log: BrokerEnv) -> None:
    items = lines(busy_log)
    write(busy_log, items[:-3])  # a whole, well-formed chain, just shorter
    result = busy_log.run("audit", "verify")
    assert result.code == 6 and "truncated" in result.stderr


def test_a_torn_last_record_is_reported_and_repaired_only_on_request(busy_log: BrokerEnv) -> None:
    items = lines(busy_log)
    write(busy_log, items + ['{"seq": 999, "event": "cred'])
    result = busy_log.run("audit", "verify")
    assert result.code == 6 and "torn" in result.stderr and "--repair" in result.stderr
    assert (
        busy_log.run("issue", "--task", str(busy_log.write_task(VAULT_TASK))).code == 6
    )  # no appends after a torn record
    repaired = busy_log.run("audit", "verify", "--repair")
    assert repaired.code == 0, repaired.stderr
    assert "repaired" in repaired.stderr
    assert busy_log.events()[-2:] == ["log.repaired", "checkpoint"]
    assert busy_log.run("audit", "verify").code == 0


def test_a_rotated_key_still_verifies_older_checkpoints(busy_log: BrokerEnv, tmp_path: Path) -> None:
    assert busy_log.run("audit", "rotate-key").code == 0
    assert busy_log.run("issue", "--task", str(busy_log.write_task(VAULT_TASK))).code == 0
    key_ids = {r["key_id"] for r in busy_log.log_records() if r["event"] == "checkpoint"}
    assert len(key_ids) == 2
    assert busy_log.run("audit", "verify").code == 0
    public = tmp_path / "broker.pub"
    public.write_text(busy_log.run("audit", "public-key").stdout)
    assert len(public.read_text().splitlines()) == 2
    assert busy_log.run("audit", "verify", "--log", str(busy_log.log_path), "--public-key", str(public)).code == 0


def test_list_filters_and_formats(busy_log: BrokerEnv) -> None:
    issued = busy_log.run("audit", "list", "--event", "credential.issued", "--json")
    records = [json.loads(line) for line in issued.stdout.splitlines()]
    assert len(records) == 3 and {r["event"] for r in records} == {"credential.issued"}
    one = records[0]["session"]
    by_session = busy_log.run("audit", "list", "--session", one, "--json").stdout.splitlines()
    assert {json.loads(line)["event"] for line in by_session} == {
        "credential.issued",
        "session.issued",
        "credential.revoked",
        "session.revoked",
    }
    csv_out = busy_log.run("audit", "list", "--task", "fix-build-7", "--csv").stdout.splitlines()
    assert csv_out[0] == "seq,time,event,session,task,credential,provider,requester"
    future = busy_log.run("audit", "list", "--since", "2999-01-01T00:00:00Z", "--json")
    assert future.code == 0 and future.stdout == ""
    table = busy_log.run("audit", "list", "--provider", "vault")
    assert "credential.issued" in table.stdout
    bad = busy_log.run("audit", "list", "--since", "yesterday")
    assert bad.code == 2 and "--since" in bad.stderr


def test_lookup_finds_a_leaked_token_without_echoing_it(busy_log: BrokerEnv, tmp_path: Path) -> None:
    live = busy_log.run("status", "--json").json()[0]
    token = (Path(busy_log.runtime_dir) / live["session"] / "kv" / "token").read_text()
    leaked = tmp_path / "leak.txt"
    leaked.write_text(token + "\n")
    result = busy_log.run("audit", "lookup", "--secret-file", str(leaked), "--json")
    assert result.code == 0
    [match] = result.json()
    assert (match["session"], match["task"], match["credential"]) == (live["session"], "fix-build-7", "kv")
    assert match["revoked"] is None
    assert token not in result.stdout + result.stderr
    via_stdin = busy_log.run("audit", "lookup", "--secret-stdin", stdin=token)
    assert via_stdin.code == 0 and live["session"] in via_stdin.stdout and token not in via_stdin.stdout
    unknown = busy_log.run("audit", "lookup", "--secret-stdin", stdin="s.not-a-real-token")
    assert unknown.code == 1 and "no credential" in unknown.stdout
    directory = busy_log.run("audit", "lookup", "--secret-file", str(tmp_path))
    assert directory.code == 2 and "is a directory" in directory.stderr
    huge = tmp_path / "huge"
    huge.write_bytes(b"x" * 100_000)
    assert busy_log.run("audit", "lookup", "--secret-file", str(huge)).code == 2


def test_active_lists_only_live_credentials(busy_log: BrokerEnv) -> None:
    active = busy_log.run("audit", "active", "--json").json()
    live_sessions = {s["session"] for s in busy_log.run("status", "--json").json()}
    assert {a["session"] for a in active} == live_sessions and len(live_sessions) == 2
    for session in live_sessions:
        busy_log.run("revoke", "--session", session)
    assert busy_log.run("audit", "active", "--json").json() == []


def test_bad_logs_are_one_line_errors(busy_log: BrokerEnv, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = busy_log.run("audit", "verify", "--log", str(empty))
    assert result.code == 6 and "is empty" in result.stderr
    missing = busy_log.run("audit", "verify", "--log", str(tmp_path / "nope.jsonl"))
    assert missing.code == 2 and "not found" in missing.stderr
    keyfile = tmp_path / "bad.pub"
    keyfile.write_text("not a key\n")
    bad_key = busy_log.run("audit", "verify", "--log", str(busy_log.log_path), "--public-key", str(keyfile))
    assert bad_key.code == 2 and "public key file line 1" in bad_key.stderr
