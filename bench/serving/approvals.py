"""The approvals and delegation figures: through ``broker serve``, loopback, one Vault credential.

Part of ``scripts/bench`` (``--only approvals``; ``--quick`` makes it small), or alone; either way it
starts its own OpenBao dev server (devstack) and its own daemon:

    .venv/bin/python -m bench.serving.approvals [--runs 15] [--pending 100]

Figures (medians of ``--runs`` runs):
- approve-to-session: a thin client ``broker issue --json`` waits for its approval; an approver (another
  uid, connected beforehand) sends ``POST /v1/approvals/ID/approve``; from that request leaving to the
  waiting issue's exit (it printed the session document);
- a child session against an issue of the same credentials: ``POST /v1/sessions`` on an exec session's
  ``broker.sock`` against the same on the daemon's socket (each followed by its revoke), alternating;
- ``--pending`` requests awaiting approval: ``GET /v1/approvals`` (the daemon's answer) and
  ``broker approvals --json`` (the thin client, a process of its own).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import PYTHON, Report, Row, Settings
from bench.serving.daemon import http, run, wait
from devstack.openbao import ROOT_TOKEN, TOKEN_ROLE, start_openbao, stop_openbao

APPROVER_UID = 59124  # no account: an approver by uid
CREDENTIAL = {"name": "kv", "provider": "vault", "policies": ["ci-read"], "ttl": "10m", "num_uses": 5}
SANDBOX = {"uid": 0, "gid": 0}  # the bench connects to the exec session's socket as root, its sandbox user
POLICY = f"""rules:
  - id: approved
    tasks: ["deploy-*"]
    sandbox_uids: ["0-65534"]
    sandbox_gids: ["0-65534"]
    allow_root_sandbox: true
    approval: {{approvers: [{APPROVER_UID}], timeout: 15m}}
    grants:
      - {{provider: vault, policies: ["ci-*"], max_ttl: 30m, max_uses: 100}}
  - id: delegating
    tasks: ["fix-*"]
    sandbox_uids: ["0-65534"]
    sandbox_gids: ["0-65534"]
    allow_root_sandbox: true
    delegate: true
    grants:
      - {{provider: vault, policies: ["ci-*"], max_ttl: 30m, max_uses: 100}}
"""
APPROVER = """
import socket, sys
sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
body = ('{"digest": "%s"}' % sys.argv[3]).encode()
head = "POST /v1/approvals/%s/approve HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n"
print("ready", flush=True)
sys.stdin.readline()
sock.sendall((head % (sys.argv[2], len(body))).encode() + body)
answer = b""
while chunk := sock.recv(65536):
    answer += chunk
print(answer.split(b" ", 2)[1].decode(), flush=True)
"""


def _task(name: str, **extra: Any) -> dict[str, Any]:
    return {"version": 1, "task": name, "sandbox": SANDBOX, "credentials": [CREDENTIAL], **extra}


def _approve_to_session(work: Path, sock: Path, env: dict[str, str]) -> float:
    """Seconds from the approve request leaving to the waiting ``broker issue`` having exited."""
    waiting = subprocess.Popen(
        [PYTHON, "-m", "broker", "issue", "--task", str(work / "deploy.json"), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert waiting.stderr is not None
    line = waiting.stderr.readline()  # "broker: awaiting approval: request ID, digest HEX; ..."
    request, digest = line.split("request ", 1)[1].split(",", 1)[0], line.split("digest ", 1)[1].split(";", 1)[0]
    approver = subprocess.Popen(
        ["setpriv", f"--reuid={APPROVER_UID}", "--regid=0", "--clear-groups", PYTHON, "-I", "-c", APPROVER,
         str(sock), request, digest],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert approver.stdin is not None and approver.stdout is not None
    if approver.stdout.readline().strip() != "ready":
        raise RuntimeError("bench.serving.approvals: the approver could not connect")
    started = time.perf_counter()
    approver.stdin.write("go\n")
    approver.stdin.flush()
    out, err = waiting.communicate(timeout=120)
    elapsed = time.perf_counter() - started
    if approver.communicate(timeout=60)[0].strip() != "200" or waiting.returncode != 0:
        raise RuntimeError(f"bench.serving.approvals: approve-to-session failed: {err.strip()[-200:]}")
    http(sock, "DELETE", f"/v1/sessions/{json.loads(out)['session']}")
    return elapsed


def _hold_exec(sock: Path) -> tuple[socket.socket, dict[str, Any]]:
    """An exec session held on a connection of its own (``POST /v1/exec``), whose rules allow children."""
    held = socket.socket(socket.AF_UNIX)
    held.connect(str(sock))
    body = json.dumps({"manifest": _task("fix-parent", ttl="30m"), "sandbox": "none", "network": "none"}).encode()
    head = f"POST /v1/exec HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    held.sendall(head + body)
    answer = b""
    while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
        answer += held.recv(65536)
    return held, json.loads(answer.partition(b"\r\n\r\n")[2])


def _length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def measure(runs: int, pending: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-approvals-"))
    work.chmod(0o755)  # the approver (another uid) reaches the daemon's socket here
    bao = start_openbao()
    daemon: subprocess.Popen[bytes] | None = None
    try:
        (work / "policies").mkdir()
        (work / "policies" / "bench.yaml").write_text(POLICY)
        (work / "vault-token").write_text(ROOT_TOKEN)
        (work / "vault-token").chmod(0o600)
        sock = work / "broker.sock"
        config = (
            f'state_dir = "{work}/state"\nruntime_dir = "{work}/run"\npolicy_dir = "{work}/policies"\n'
            f'audit_key = "{work}/audit.key"\n\n[daemon]\nsocket = "{sock}"\nsocket_group = "0"\n'
            f'\n[providers.vault]\ntype = "vault"\naddr = "{bao.addr}"\ntoken_file = "{work}/vault-token"\n'
            f'token_role = "{TOKEN_ROLE}"\n'
        )
        (work / "daemon.toml").write_text(config)
        (work / "deploy.json").write_text(json.dumps(_task("deploy-bench")))
        env = {"PATH": os.environ["PATH"], "BROKER_SOCKET": str(sock)}
        daemon = subprocess.Popen([PYTHON, "-m", "broker", "--config", str(work / "daemon.toml"), "serve"])
        wait(lambda: sock.exists(), "the daemon")
        _approve_to_session(work, sock, env)  # warm: the first of everything
        approve = statistics.median(_approve_to_session(work, sock, env) for _ in range(runs))
        held, started = _hold_exec(sock)
        child_socket = Path(started["session"]["dir"]) / "broker.sock"
        child_task = {**_task("fix-child", ttl="5m"), "credentials": [{**CREDENTIAL, "ttl": "5m"}]}
        child_ms: list[float] = []
        issue_ms: list[float] = []
        for index in range(2 * runs + 2):
            target, samples = (child_socket, child_ms) if index % 2 else (sock, issue_ms)
            begun = time.perf_counter()
            status, document = http(target, "POST", "/v1/sessions", child_task)
            elapsed = time.perf_counter() - begun
            if status != 201:
                raise RuntimeError(f"bench.serving.approvals: an issue answered {status}: {document}")
            http(target, "DELETE", f"/v1/sessions/{document['session']}")
            if index >= 2:  # the first pair warms
                samples.append(elapsed * 1000)
        held.close()
        for _ in range(pending):
            status, _ = http(sock, "POST", "/v1/sessions", _task("deploy-bench"))
            if status != 202:
                raise RuntimeError(f"bench.serving.approvals: a request answered {status}")
        answer_ms, thin_ms = [], []
        for _ in range(runs):
            begun = time.perf_counter()
            status, listed = http(sock, "GET", "/v1/approvals")
            answer_ms.append((time.perf_counter() - begun) * 1000)
            begun = time.perf_counter()
            run([PYTHON, "-m", "broker", "approvals", "--json"], env)
            thin_ms.append((time.perf_counter() - begun) * 1000)
        if len(listed) < pending:
            raise RuntimeError(f"bench.serving.approvals: {len(listed)} requests listed, {pending} made")
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
        stop_openbao(bao)
        shutil.rmtree(work, ignore_errors=True)
    return {
        "runs": runs,
        "approve_to_session_ms": round(approve * 1000, 2),
        "child_issue_ms": round(statistics.median(child_ms), 2),
        "daemon_issue_ms": round(statistics.median(issue_ms), 2),
        "pending": pending,
        "list_answer_ms": round(statistics.median(answer_ms), 2),
        "list_thin_client_ms": round(statistics.median(thin_ms), 2),
    }


def add_rows(found: dict[str, Any], report: Report) -> None:
    approve = found["approve_to_session_ms"]
    report.add(
        Row(
            "approvals", "approvals: approve-to-session through the daemon (the waiting issue returning)",
            approve, "ms", "< 100 ms", approve < 100, "(loopback, one Vault credential)", found,
        )
    )  # fmt: skip
    ratio = found["child_issue_ms"] / found["daemon_issue_ms"]
    report.add(
        Row(
            "approvals", "delegation: a child session / an issue of the same credentials, through the daemon",
            round(ratio, 2), "x", "<= 1x", ratio <= 1.0,
            f"({found['child_issue_ms']:.1f} vs {found['daemon_issue_ms']:.1f} ms, the daemon's answers)", found,
        )
    )  # fmt: skip
    answer, thin = found["list_answer_ms"], found["list_thin_client_ms"]
    report.add(
        Row(
            "approvals", f"approvals: {found['pending']} pending listed, the daemon's answer", answer, "ms", "< 50 ms",
            answer < 50, f"(`broker approvals --json` as a thin client, its own process: {thin:.0f} ms)", found,
        )
    )  # fmt: skip


def figure_approvals(settings: Settings, report: Report) -> None:
    add_rows(measure(settings.daemon_runs, 20 if settings.quick else 100), report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--pending", type=int, default=100)
    options = parser.parse_args()
    found = measure(options.runs, options.pending)
    report = Report()
    add_rows(found, report)
    for row in report.rows:
        print(f"{row.name}: {row.shown_value()} (goal {row.goal}) {row.detail}")
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
