"""``broker serve`` and its thin client, over a real Unix socket with real peers (other uids via setpriv)."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.fixtures.brokerenv import BrokerEnv, Result
from tests.fixtures.daemon import (
    OTHER_UID,
    OUTSIDER_UID,
    SOCKET_GID,
    STRANGER_UID,
    WAIT,
    Daemon,
    _wait_for,
    daemon,
    raw_exchange,
)
from tests.fixtures.openbao import AppRoleLogin, OpenBao, admin_approle, approle_table
from tests.fixtures.slowproxy import slow_proxy

__all__ = ["daemon"]  # fixture

pytestmark = pytest.mark.server

PROVIDER_SDKS = ("hvac", "boto3", "botocore", "jwt", "requests", "typer")


def _sessions(env: BrokerEnv) -> dict[str, str]:
    result = env.run("status", "--all", "--json")
    assert result.code == 0, result.stderr
    return {item["session"]: item["state"] for item in result.json()}


def test_issue_status_revoke_through_the_daemon_match_the_direct_cli(daemon: Daemon, openbao: OpenBao) -> None:
    daemon.start()
    task = daemon.task()
    issued = daemon.client("issue", "--task", str(task), "--json")
    assert issued.code == 0, issued.stderr
    document = issued.json()
    assert set(document) == {"session", "task", "expires_at", "dir", "mount_path", "credentials", "env"}
    assert Path(document["dir"], "kv", "token").exists()
    status = daemon.client("status", "--json")
    assert status.code == 0, status.stderr
    assert [item["session"] for item in status.json()] == [document["session"]]
    assert status.json() == daemon.env.run("status", "--json").json()  # the same document as the direct CLI
    text = daemon.client("status")
    assert text.code == 0 and document["session"] in text.stdout and "SESSION" in text.stdout
    record = next(r for r in daemon.env.log_records() if r["event"] == "credential.issued")
    assert openbao.accessor_exists(record["reference"]["accessor"])
    revoked = daemon.client("revoke", "--session", document["session"])
    assert revoked.code == 0, revoked.stderr
    assert revoked.stdout == f"session {document['session']}: directory removed\n  kv (vault): revoked\n"
    assert not openbao.accessor_exists(record["reference"]["accessor"])
    again = daemon.client("revoke", "--session", document["session"], "--json")
    assert again.code == 0 and again.json()["session"] == document["session"]  # idempotent
    unknown = daemon.client("revoke", "--session", "s-aaaaaaaaaaaa")
    assert (unknown.code, unknown.stdout) == (2, "")
    assert unknown.stderr.startswith("broker: error: ") and unknown.stderr.count("\n") == 1
    assert daemon.env.run("audit", "verify").code == 0


def test_a_requester_is_the_peer_uid_and_never_a_claim(daemon: Daemon) -> None:
    daemon.env.write_policy(
        """
        rules:
          - id: launcher
            tasks: ["fix-*"]
            requesters: ["uid:1000"]
            sandbox_uids: [1000]
            sandbox_gids: [1000]
            grants:
              - provider: vault
                policies: ["ci-*"]
                max_ttl: 30m
                max_uses: 100
        """
    )
    daemon.start()
    task = daemon.task()
    allowed = daemon.client("issue", "--task", str(task), "--json", uid=OTHER_UID)
    assert allowed.code == 0, allowed.stderr
    issued = next(r for r in daemon.env.log_records() if r["event"] == "session.issued")
    assert issued["requester"] == "cloudsdk"  # uid 1000's name, from SO_PEERCRED
    denied = daemon.client("issue", "--task", str(task), uid=STRANGER_UID)
    assert denied.code == 3, denied.stderr
    assert denied.stderr.startswith("broker: error: denied by policy") and denied.stderr.count("\n") == 1
    check = daemon.client("policy", "check", "--task", str(task), "--json", uid=STRANGER_UID)
    assert check.code == 3 and check.json()["requester"] == f"uid:{STRANGER_UID}"
    # A stranger claiming to be uid 1000 in every place a request could carry it is still the stranger.
    claim = (
        "import json, socket, sys\n"
        "body = open(sys.argv[2]).read().encode()\n"
        "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
        "s.sendall(b'POST /v1/policy/check?requester=uid:1000&uid=1000 HTTP/1.1\\r\\nHost: x\\r\\n'\n"
        "  b'X-Broker-Requester: uid:1000\\r\\nX-Remote-User: cloudsdk\\r\\nConnection: close\\r\\n'\n"
        "  + b'Content-Length: %d\\r\\n\\r\\n' % len(body) + body)\n"
        "print(s.makefile('rb').read().partition(b'\\r\\n\\r\\n')[2].decode())\n"
    )
    body = daemon.shared / "task.json"
    body.write_text(
        json.dumps(
            {
                "version": 1,
                "task": "fix-build-7",
                "credentials": [{"name": "kv", "provider": "vault", "policies": ["ci-read"]}],
                "sandbox": {"uid": 1000, "gid": 1000},
            }
        )
    )
    body.chmod(0o644)
    answer = subprocess.run(
        ["setpriv", f"--reuid={STRANGER_UID}", f"--regid={SOCKET_GID}", "--clear-groups", sys.executable, "-c", claim]
        + [str(daemon.socket), str(body)],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=True,
    )
    reply = json.loads(answer.stdout)
    assert reply["exit_code"] == 3 and reply["decision"]["requester"] == f"uid:{STRANGER_UID}"


def test_the_socket_is_0660_in_its_group_and_closed_to_others(daemon: Daemon) -> None:
    daemon.start()
    info = os.stat(daemon.socket)
    assert stat.S_ISSOCK(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o660
    assert info.st_gid == SOCKET_GID
    outsider = daemon.client("status", uid=OUTSIDER_UID, gid=OUTSIDER_UID)
    assert outsider.code == 7, outsider.stderr
    assert outsider.stderr.startswith("broker: error: cannot reach the broker daemon")
    assert outsider.stderr.count("\n") == 1 and "Traceback" not in outsider.stderr
    member = daemon.client("status", "--json", uid=STRANGER_UID)
    assert (member.code, member.json()) == (0, [])


def test_an_unreachable_daemon_is_exit_7_and_never_direct_mode(daemon: Daemon) -> None:
    task = daemon.task()
    for args in (("issue", "--task", str(task)), ("status",), ("revoke", "--session", "s-aaaaaaaaaaaa")):
        result = daemon.client("--config", str(daemon.env.config_path), *args, env={"BROKER_SOCKET": ""})
        assert result.code == 7, (args, result.stderr)
        assert result.stdout == "" and result.stderr.count("\n") == 1
        assert result.stderr.startswith("broker: error: cannot reach the broker daemon at")
    assert daemon.env.log_records() == []  # nothing ran in direct mode
    assert _sessions(daemon.env) == {}


def test_the_thin_client_imports_no_provider_sdk_and_no_typer(daemon: Daemon) -> None:
    daemon.start()
    task = daemon.task()
    exec_args = ("exec", "--task", str(task), "--", "true")  # the client runs the sandbox; the daemon mints
    for args in (("status", "--json"), ("issue", "--task", str(task), "--json"), ("status",), exec_args):
        completed = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "broker", *args],
            capture_output=True,
            text=True,
            env={"PATH": os.environ["PATH"], "BROKER_SOCKET": str(daemon.socket)},
            timeout=WAIT,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr
        modules = {line.rsplit("|", 1)[1].strip() for line in completed.stderr.splitlines() if "import time:" in line}
        assert "broker.daemon.transport" in modules  # the measurement sees the client's own imports
        loaded = {name for name in modules if name.split(".")[0] in PROVIDER_SDKS}
        assert loaded == set(), (args, sorted(loaded))


def test_malformed_http_and_json_get_400_and_one_line(daemon: Daemon) -> None:
    daemon.start()
    for data in (b"GARBAGE\r\n\r\n", b"GET /v1/health HTTP/1.1\r\nno colon here\r\n\r\n", b"\x00\xff\r\n\r\n"):
        status, body = raw_exchange(daemon.socket, data)
        assert status == 400 and body["exit_code"] == 2
        assert body["error"].startswith("malformed HTTP request") and "\n" not in body["error"]
    for payload in (b"{not json", b"[1, 2]", b'{"version": 1, "task": "fix-1", "credentials": "x"}', b"\xff\xfe"):
        status, body = daemon.request("POST", "/v1/sessions", payload)
        assert status == 400 and body["exit_code"] == 2, body
        assert "Traceback" not in body["error"] and "\n" not in body["error"]
    status, body = daemon.request("GET", "/v1/nothing")
    assert status == 404 and body["exit_code"] == 2
    assert daemon.request("GET", "/v1/health")[0] == 200  # and the daemon is still serving
    assert "Traceback" not in (daemon.env.root / "daemon.log").read_text()


def test_sigterm_lets_the_issue_in_flight_finish(daemon: Daemon, openbao: OpenBao) -> None:
    port = int(urlsplit(openbao.addr).port or 0)
    with slow_proxy(port, delay=1.5, hold=b"auth/token/create") as proxy:
        daemon.env.providers["vault"]["addr"] = proxy.addr
        daemon.env.write_config()
        daemon.start()
        task = daemon.task()
        results: list[Result] = []
        client = threading.Thread(target=lambda: results.append(daemon.client("issue", "--task", str(task), "--json")))
        client.start()
        assert proxy.held.wait(WAIT)  # the mint is on its way: the request is in flight
        assert daemon.stop(signal.SIGTERM) == 0
        client.join(WAIT)
    [issued] = results
    assert issued.code == 0, issued.stderr
    session = issued.json()["session"]
    assert _sessions(daemon.env) == {session: "active"}  # it stays valid until revoked or swept
    after = daemon.client("status")
    assert after.code == 7  # the daemon is gone and nobody falls back
    assert daemon.env.run("audit", "verify").code == 0


def test_a_sigkilled_daemons_half_issued_session_is_revoked_by_the_next_sweep(daemon: Daemon, openbao: OpenBao) -> None:
    port = int(urlsplit(openbao.addr).port or 0)
    before = set(openbao.accessors())
    with slow_proxy(port, delay=30, hold=b"auth/token/create") as proxy:
        daemon.env.providers["vault"]["addr"] = proxy.addr
        daemon.env.write_config()
        daemon.start()
        task = daemon.task()
        results: list[Result] = []
        client = threading.Thread(target=lambda: results.append(daemon.client("issue", "--task", str(task))))
        client.start()
        assert proxy.held.wait(WAIT)
        _wait_for(lambda: len(set(openbao.accessors()) - before) == 1, "the token minted upstream")
        assert daemon.stop(signal.SIGKILL) == -signal.SIGKILL
        client.join(WAIT)
    [lost] = results
    assert lost.code == 7 and lost.stderr.startswith("broker: error: the broker daemon at")
    [(session, state)] = _sessions(daemon.env).items()
    assert state == "issuing"
    [minted] = set(openbao.accessors()) - before
    daemon.env.providers["vault"]["addr"] = openbao.addr
    daemon.env.write_config()
    daemon.start()  # its first sweep finds the session no live broker holds
    _wait_for(lambda: _sessions(daemon.env)[session] not in ("issuing", "revoking"), "the sweep")
    assert _sessions(daemon.env)[session] == "revoked"
    assert not openbao.accessor_exists(minted)
    revoked = [r for r in daemon.env.log_records() if r["event"] == "credential.revoked"]
    assert revoked and all(r["session"] == session and r["reason"].startswith("crash recovery") for r in revoked)
    assert daemon.env.run("audit", "verify").code == 0


def test_a_hundred_clients_during_a_revoke_storm_lose_no_record(daemon: Daemon) -> None:
    daemon.start()
    body = json.dumps(
        {
            "version": 1,
            "task": "fix-storm",
            "sandbox": {"uid": 1000, "gid": 1000},
            "credentials": [{"name": "kv", "provider": "vault", "policies": ["ci-read"], "ttl": "5m", "num_uses": 5}],
        }
    ).encode()
    sessions = []
    for _ in range(20):
        status, document = daemon.request("POST", "/v1/sessions", body)
        assert status == 201, document
        sessions.append(document["session"])
    outcomes: list[tuple[str, int]] = []
    lock = threading.Lock()

    def revoke(session: str) -> None:
        status, _ = daemon.request("DELETE", f"/v1/sessions/{session}")
        with lock:
            outcomes.append(("revoke", status))

    def hammer(index: int) -> None:
        if index % 4 == 0:
            status, _ = daemon.request("POST", "/v1/sessions", body)
            kind = "issue"
        elif index % 4 == 1:
            status, _ = daemon.request("POST", "/v1/policy/check", body)
            kind = "check"
        else:
            status, _ = daemon.request("GET", "/v1/sessions")
            kind = "status"
        with lock:
            outcomes.append((kind, status))

    threads = [threading.Thread(target=revoke, args=(s,)) for s in sessions]
    threads += [threading.Thread(target=hammer, args=(i,)) for i in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 3)
    assert len(outcomes) == 120
    assert {kind: status for kind, status in outcomes if status not in (200, 201)} == {}
    records = daemon.env.log_records()
    issued = [r["session"] for r in records if r["event"] == "session.issued"]
    revoked = [r["session"] for r in records if r["event"] == "session.revoked"]
    assert len(issued) == 20 + 25 and len(set(issued)) == 45
    assert sorted(revoked) == sorted(sessions)
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    verify = daemon.env.run("audit", "verify")
    assert verify.code == 0, verify.stdout + verify.stderr


def test_the_daemon_keeps_its_vault_login_alive_past_its_ttl(daemon: Daemon, openbao: OpenBao) -> None:
    admin_approle(openbao)  # the broker policy and the token roles
    root = openbao.client()
    name = f"daemon-{uuid.uuid4().hex[:8]}"
    root.auth.approle.create_or_update_approle(
        name, token_policies=["broker", "ci-read"], token_ttl="4s", token_max_ttl="1h"
    )
    login = AppRoleLogin(
        role_id=root.auth.approle.read_role_id(name)["data"]["role_id"],
        secret_id=root.auth.approle.generate_secret_id(name)["data"]["secret_id"],
        entity_id="",
    )
    daemon.env.providers["vault"] = approle_table(daemon.env, openbao, login, "broker-session")
    daemon.env.write_config()
    daemon.start()
    task = daemon.task()
    first = daemon.client("issue", "--task", str(task), "--json")
    assert first.code == 0, first.stderr
    time.sleep(8)  # twice the login's TTL: only a login kept alive (or made again) can still mint
    later = daemon.client("issue", "--task", str(task), "--json")
    assert later.code == 0, later.stderr


def test_socket_activation_serves_on_the_socket_systemd_hands_over(daemon: Daemon) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(daemon.socket))
    listener.listen(16)
    command = f'LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" -m broker --config {daemon.env.config_path} serve'
    process = subprocess.Popen(
        ["sh", "-c", command, sys.executable],
        preexec_fn=lambda: os.dup2(listener.fileno(), 3),  # where systemd puts the first socket
        close_fds=False,
        stderr=subprocess.DEVNULL,
    )
    listener.close()  # only the daemon holds it now
    daemon.process = process
    try:
        assert daemon.request("GET", "/v1/health")[0] == 200  # answered at once: the socket was already listening
        status = daemon.client("status", "--json")
        assert (status.code, status.json()) == (0, [])
    finally:
        assert daemon.stop(signal.SIGTERM) == 0


def test_doctor_checks_the_daemon(daemon: Daemon) -> None:
    def daemon_check() -> dict[str, Any]:
        report = daemon.env.run("doctor", "--json").json()
        return next(c for c in report["checks"] if c["name"] == "daemon")

    assert daemon_check()["ok"] is False  # not running
    daemon.start()
    check = daemon_check()
    assert check["ok"] is True and "answers" in check["detail"]
    daemon.socket.chmod(0o666)
    check = daemon_check()
    assert check["ok"] is False and "every local user" in check["detail"]


def test_issue_gateway_on_a_daemon_without_a_gateway_is_refused_naming_the_key(daemon: Daemon) -> None:
    daemon.start()
    refused = daemon.client("issue", "--gateway", "--task", str(daemon.task()))
    assert refused.code == 2
    assert refused.stderr.strip() == (
        "broker: error: issue --gateway: this daemon runs no gateway; set [gateway] listen in its config"
    )
    assert not [r for r in daemon.env.log_records() if r["event"] in ("session.issued", "credential.issued")]
