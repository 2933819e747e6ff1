"""Lifecycle and crash safety with real processes and a real OpenBao: expiry and sweep, a broker killed or
signalled during issue, an outage at revocation, parallel sessions beside a sweep, renewal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from broker.host import mounts
from broker.host.sessiondir import SESSION_TMPFS_MODE, SESSION_TMPFS_SIZE
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.crash import TWO_CREDENTIALS, add_slow_vault, issuing_session, start_issue, tokens_of, wait_for
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.slowproxy import slow_proxy

pytestmark = pytest.mark.server


def test_an_expired_session_is_swept_and_logged(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    task = vault_env.write_task(VAULT_TASK.replace("ttl: 20m", "ttl: 2s").replace("    ttl: 10m\n", ""))
    document = vault_env.run("issue", "--task", str(task), "--json").json()
    assert vault_env.run("sweep", "--json").json()["expired"] == []  # not yet
    time.sleep(2.2)
    result = vault_env.run("sweep", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["expired"] == [document["session"]]
    assert "session.expired" in vault_env.events()
    outcomes = [r["outcome"] for r in vault_env.log_records() if r["event"] == "credential.revoked"]
    assert outcomes == ["expired"]
    assert not os.path.lexists(document["dir"])
    assert tokens_of(openbao, document["session"]) == []
    assert vault_env.run("status", "--all", "--json").json()[0]["state"] == "expired"


@pytest.mark.skipif(os.geteuid() != 0, reason="the crash leaves a tmpfs mount only root can make")
def test_sigkill_between_two_mints_is_finished_by_sweep(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    """The slow provider mints its token, but the broker is killed before it hears back."""
    with slow_proxy(urlparse(openbao.addr).port or 0, delay=30) as proxy:
        add_slow_vault(vault_env, proxy.addr)
        process = start_issue(vault_env, vault_env.write_task(TWO_CREDENTIALS))
        try:
            wait_for(lambda: bool(issuing_session(vault_env)))
            session = issuing_session(vault_env)
            wait_for(lambda: len(tokens_of(openbao, session)) == 2)  # the slow one exists at OpenBao too
            process.send_signal(signal.SIGKILL)
            process.wait(10)
        finally:
            process.kill()
        assert mounts.is_mount_point(vault_env.runtime_dir / session)  # left behind by the crash
        assert vault_env.run("status", "--json").json()[0]["state"] == "issuing"
        proxy.delay = 0  # the provider answers promptly again
        result = vault_env.run("sweep", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["recovered"] == [session]
    assert tokens_of(openbao, session) == []
    assert not os.path.lexists(vault_env.runtime_dir / session)
    assert not mounts.is_mount_point(vault_env.runtime_dir / session)
    assert vault_env.run("status", "--all", "--json").json()[0]["state"] == "revoked"
    assert vault_env.run("audit", "verify").code == 0


def test_sigterm_during_issue_rolls_back(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    """One credential is minted when the signal comes: everything is revoked and the exit is 4."""
    with slow_proxy(urlparse(openbao.addr).port or 0, delay=2) as proxy:
        add_slow_vault(vault_env, proxy.addr)
        process = start_issue(vault_env, vault_env.write_task(TWO_CREDENTIALS))
        wait_for(lambda: bool(issuing_session(vault_env)))
        session = issuing_session(vault_env)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 4, stderr
    assert stderr == "broker: error: interrupted by signal 15; what was minted has been rolled back\n"
    assert tokens_of(openbao, session) == []
    assert vault_env.session_dirs() == []
    assert vault_env.run("status", "--all", "--json").json()[0]["state"] == "failed"


def test_outage_leaves_revocations_pending_until_sweep(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    with slow_proxy(urlparse(openbao.addr).port or 0, delay=0) as proxy:
        vault_env.providers["vault"]["addr"] = proxy.addr
        vault_env.write_config()
        document = vault_env.run("issue", "--task", str(vault_env.write_task(VAULT_TASK)), "--json").json()
        proxy.refusing = True
        result = vault_env.run("revoke", "--session", document["session"], "--json")
        assert result.code == 5
        assert result.json()["credentials"][0]["outcome"] == "pending"
        assert result.json()["dir_removed"] is True  # the sandbox loses the files even so
        assert len(tokens_of(openbao, document["session"])) == 1
        assert "credential.revoke_failed" in vault_env.events()
        still = vault_env.run("sweep", "--json")
        assert still.code == 5 and still.json()["pending"] == [{"session": document["session"], "credential": "kv"}]
        proxy.refusing = False
        result = vault_env.run("sweep", "--json")
    assert result.code == 0, result.stderr
    assert tokens_of(openbao, document["session"]) == []
    assert vault_env.run("status", "--all", "--json").json()[0]["state"] == "revoked"


def test_sweep_removes_orphaned_directories_and_mounts(vault_env: BrokerEnv) -> None:
    """Session directories the store no longer knows (a lost state_dir) that prove to be the broker's."""
    vault_env.runtime_dir.mkdir(mode=0o711, exist_ok=True)
    documented = vault_env.runtime_dir / "s-orphandoc000"  # a session.json naming it
    documented.mkdir()
    (documented / "session.json").write_text(json.dumps({"session": documented.name}))
    (documented / "token").write_text("stale")
    expected = [documented.name]
    if os.geteuid() == 0:  # the broker's own tmpfs: mounted with its size, mode and flags
        mounted = vault_env.runtime_dir / "s-orphan000000"
        mounted.mkdir()
        mounts.mount_tmpfs(mounted, size=SESSION_TMPFS_SIZE, mode=SESSION_TMPFS_MODE, uid=0, gid=0)
        (mounted / "token").write_text("stale")
        expected.insert(0, mounted.name)
    result = vault_env.run("sweep", "--json")
    assert result.code == 0 and result.json()["orphans_removed"] == expected
    assert result.json()["foreign"] == []
    for name in expected:
        orphan = vault_env.runtime_dir / name
        assert not os.path.lexists(orphan) and not mounts.is_mount_point(orphan)


def test_sixteen_parallel_sessions_with_a_sweep_alongside(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    task = vault_env.write_task(VAULT_TASK)
    script = (
        "import json,subprocess,sys\n"
        "cfg, task = sys.argv[1], sys.argv[2]\n"
        "run = lambda *a: subprocess.run([sys.executable, '-m', 'broker.cli', '--config', cfg, *a],"
        " capture_output=True, text=True)\n"
        "issued = run('issue', '--task', task, '--json')\n"
        "assert issued.returncode == 0, issued.stderr\n"
        "session = json.loads(issued.stdout)['session']\n"
        "revoked = run('revoke', '--session', session)\n"
        "assert revoked.returncode == 0, revoked.stderr\n"
        "print(session)\n"
    )
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(vault_env.config_path), str(task)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(16)
    ]
    sweeps = [vault_env.run_process("sweep") for _ in range(3)]
    sessions = []
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        sessions.append(out.strip())
    assert all(s.code in (0,) for s in sweeps), [s.stderr for s in sweeps]
    assert len(set(sessions)) == 16
    revoked = [r for r in vault_env.log_records() if r["event"] == "credential.revoked"]
    assert sorted(r["session"] for r in revoked) == sorted(sessions)  # each exactly once
    assert {r["outcome"] for r in revoked} == {"revoked"}
    assert vault_env.run("audit", "verify").code == 0
    assert vault_env.session_dirs() == []
    assert all(not tokens_of(openbao, s) for s in sessions[:4])


def test_renew_swaps_in_a_fresh_credential_and_revokes_the_old(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    document = vault_env.run("issue", "--task", str(vault_env.write_task(VAULT_TASK)), "--json").json()
    token_file = Path(document["dir"]) / "kv" / "token"
    old_token = token_file.read_text()
    old_accessor = next(r for r in vault_env.log_records() if r["event"] == "credential.issued")["reference"][
        "accessor"
    ]
    result = vault_env.run("renew", "--session", document["session"], "--json")
    assert result.code == 0, result.stderr
    [renewal] = result.json()
    assert renewal["name"] == "kv" and renewal["old_outcome"] == "revoked"
    assert renewal["new_expires_at"] >= renewal["old_expires_at"]
    new_token = token_file.read_text()
    assert new_token != old_token and oct(token_file.stat().st_mode & 0o777) == "0o400"
    assert not openbao.accessor_exists(old_accessor)
    issued = [r for r in vault_env.log_records() if r["event"] == "credential.issued"]
    assert issued[-1]["renewal_of"] == "kv~1" and openbao.accessor_exists(issued[-1]["reference"]["accessor"])
    metadata = json.loads((Path(document["dir"]) / "session.json").read_text())
    assert metadata["credentials"][0]["expires_at"] == renewal["new_expires_at"]
    status = vault_env.run("status", "--json").json()[0]["credentials"]
    assert [(c["name"], c["state"]) for c in status] == [("kv~1", "revoked"), ("kv", "active")]
    revoked = vault_env.run("revoke", "--session", document["session"], "--json")
    assert revoked.code == 0 and not openbao.accessor_exists(issued[-1]["reference"]["accessor"])
    assert vault_env.run("audit", "verify").code == 0


def test_a_renewal_the_policy_no_longer_allows_changes_nothing(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    document = vault_env.run("issue", "--task", str(vault_env.write_task(VAULT_TASK)), "--json").json()
    token = (Path(document["dir"]) / "kv" / "token").read_text()
    vault_env.write_policy(
        """
        rules:
          - id: tightened
            tasks: ["fix-*"]
            sandbox_uids: ["0-65534"]
            sandbox_gids: ["0-65534"]
            grants:
              - {provider: vault, policies: ["team-*"], max_uses: 100}
        """
    )
    result = vault_env.run("renew", "--session", document["session"])
    assert result.code == 3 and "renewal denied" in result.stderr
    assert (Path(document["dir"]) / "kv" / "token").read_text() == token
    assert vault_env.run("renew", "--session", "s-nosuchsession").code == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="the crash leaves a tmpfs mount only root can make")
def test_sigkill_after_a_mint_before_its_log_record_and_files(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    """Another broker holds the log lock: this one has minted and stored the token, then blocks before
    logging it or writing its files, and is killed there. sweep revokes it from the store's reference."""
    from filelock import FileLock

    vault_env.state_dir.mkdir(mode=0o700, exist_ok=True)
    held = FileLock(str(vault_env.state_dir / "issuance.jsonl.lock"))
    held.acquire()
    process = start_issue(vault_env, vault_env.write_task(VAULT_TASK))
    try:

        def minted_session() -> str:
            from broker.core.store import open_store
            from broker.core.store.states import SessionState

            store = open_store(vault_env.state_dir)
            try:
                live = store.sessions(states=(SessionState.ISSUING,))
                credentials = store.credentials(live[0].id) if live else []
                return live[0].id if credentials and credentials[0].state == "active" else ""
            finally:
                store.close()

        wait_for(lambda: bool(minted_session()))
        session = minted_session()
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        process.kill()
        held.release()
    assert len(tokens_of(openbao, session)) == 1
    assert not any(r.get("session") == session for r in vault_env.log_records())  # never logged
    assert not (vault_env.runtime_dir / session / "kv").exists()  # no files were written
    result = vault_env.run("sweep", "--json")
    assert result.code == 0 and result.json()["recovered"] == [session]
    assert tokens_of(openbao, session) == []
    assert not os.path.lexists(vault_env.runtime_dir / session)
    revoked = [r for r in vault_env.log_records() if r["event"] == "credential.revoked"]
    assert [(r["session"], r["reason"]) for r in revoked] == [(session, "crash recovery")]
    assert vault_env.run("audit", "verify").code == 0
