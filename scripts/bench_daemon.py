"""Bench ``broker serve`` against the direct CLI and a hand-written floor, on loopback, one Vault credential.

Standalone (it starts its own OpenBao dev server, ``bao`` from the venv, and its own daemon):

    .venv/bin/python scripts/bench_daemon.py [--runs 15] [--cycles 1000] [--concurrent 32]

Figures (medians of ``--runs`` runs unless said otherwise):
- cold start: ``python -c pass`` next to ``broker status`` as the daemon's thin client and as the direct CLI;
- issue and revoke: the floor (a process making the same Vault call with hvac and writing the file),
  the direct CLI, the thin client, and the daemon's own answer time (an in-process HTTP call);
- ``--concurrent`` issue+revoke cycles at once through the daemon: wall time, failures, ``audit verify``;
- the daemon's RSS after 10 cycles and after ``--cycles`` cycles.
Only loopback: this script models no network latency.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
TOKEN = "root"  # noqa: S105 - the dev server's root token
TASK = {
    "version": 1,
    "task": "fix-bench",
    "sandbox": {"uid": os.getuid(), "gid": os.getgid()},
    "credentials": [{"name": "kv", "provider": "vault", "policies": ["ci-read"], "ttl": "10m", "num_uses": 5}],
}
POLICY = """rules:
  - id: bench
    tasks: ["fix-*"]
    sandbox_uids: ["0-65534"]
    sandbox_gids: ["0-65534"]
    allow_root_sandbox: true
    grants:
      - provider: vault
        policies: ["ci-read"]
        max_ttl: 30m
        max_uses: 100
"""
FLOOR = """
import os, sys, hvac
addr, out = sys.argv[2], sys.argv[3]
client = hvac.Client(url=addr, token="root")
if sys.argv[1] == "issue":
    auth = client.auth.token.create(role_name="broker-session", policies=["ci-read"], ttl="600s",
                                    num_uses=5, renewable=False)["auth"]
    os.makedirs(out, mode=0o700)
    fd = os.open(os.path.join(out, "token"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    os.write(fd, auth["client_token"].encode()); os.close(fd)
    open(os.path.join(out, "accessor"), "w").write(auth["accessor"])
else:
    client.auth.token.revoke_accessor(open(os.path.join(out, "accessor")).read())
    import shutil; shutil.rmtree(out)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_daemon: gave up waiting for {what}")
        time.sleep(0.05)


def vault_up(addr: str) -> bool:
    try:
        with urllib.request.urlopen(f"{addr}/v1/sys/health", timeout=1):  # noqa: S310 - http://127.0.0.1
            return True
    except OSError:
        return False


def vault_call(addr: str, method: str, path: str, body: dict[str, Any]) -> None:
    url = f"{addr}/v1/{path}"
    request = urllib.request.Request(url, json.dumps(body).encode(), {"X-Vault-Token": TOKEN}, method=method)  # noqa: S310
    urllib.request.urlopen(request, timeout=10).close()  # noqa: S310 - http://127.0.0.1


def http(path: Path, method: str, target: str, body: Any = None) -> tuple[int, Any]:
    payload = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))
        sock.sendall(head.encode() + payload)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head_bytes, _, data = answer.partition(b"\r\n\r\n")
    return int(head_bytes.split()[1]), json.loads(data)


def timed(action: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def run(args: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench_daemon: {' '.join(args[:4])}... failed: {done.stderr.strip()}")
    return done.stdout


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--concurrent", type=int, default=32)
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-daemon-"))
    port = free_port()
    addr = f"http://127.0.0.1:{port}"
    bao = subprocess.Popen(
        [str(Path(PYTHON).parent / "bao"), "server", "-dev", f"-dev-root-token-id={TOKEN}",
         f"-dev-listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    daemon: subprocess.Popen[bytes] | None = None
    try:
        wait(lambda: vault_up(addr), "OpenBao")
        vault_call(addr, "POST", "auth/token/roles/broker-session", {"allowed_policies": "ci-read", "orphan": True})
        vault_call(addr, "PUT", "sys/policy/ci-read", {"policy": 'path "secret/data/ci/*" {capabilities = ["read"]}'})
        (work / "policies").mkdir()
        (work / "policies" / "bench.yaml").write_text(POLICY)
        (work / "vault-token").write_text(TOKEN)
        (work / "vault-token").chmod(0o600)
        sock = work / "broker.sock"
        common = (
            f'state_dir = "{work}/state"\nruntime_dir = "{work}/run"\npolicy_dir = "{work}/policies"\n'
            f'audit_key = "{work}/audit.key"\n'
        )
        vault = f'\n[providers.vault]\ntype = "vault"\naddr = "{addr}"\ntoken_file = "{work}/vault-token"\n'
        vault += 'token_role = "broker-session"\n'
        (work / "direct.toml").write_text(common + vault)
        (work / "daemon.toml").write_text(common + f'\n[daemon]\nsocket = "{sock}"\n' + vault)
        (work / "task.json").write_text(json.dumps(TASK))
        env = {"PATH": os.environ["PATH"]}
        thin_env = {**env, "BROKER_SOCKET": str(sock)}
        direct = [PYTHON, "-m", "broker", "--config", str(work / "direct.toml")]
        thin = [PYTHON, "-m", "broker", "--config", str(work / "daemon.toml")]
        daemon = subprocess.Popen([*thin, "serve"], stderr=subprocess.DEVNULL)
        wait(lambda: sock.exists(), "the daemon")
        runs = options.runs
        figures: dict[str, float] = {}
        figures["python -c pass"] = timed(lambda: run([PYTHON, "-c", "pass"]), runs)
        figures["status, thin client"] = timed(lambda: run([*thin, "status"], thin_env), runs)
        figures["status, direct"] = timed(lambda: run([*direct, "status"], env), runs)

        def floor_cycle(kind: str) -> Callable[[], object]:
            def act() -> object:
                return run([PYTHON, "-c", FLOOR, kind, addr, str(work / "floor")], env)

            return act

        issue_floor, revoke_floor, issue_direct, revoke_direct, issue_thin, revoke_thin = ([] for _ in range(6))
        issue_http, revoke_http = [], []
        for _ in range(runs):
            for samples, action in ((issue_floor, floor_cycle("issue")), (revoke_floor, floor_cycle("revoke"))):
                started = time.perf_counter()
                action()
                samples.append(time.perf_counter() - started)
            for command, samples_issue, samples_revoke, run_env in (
                (direct, issue_direct, revoke_direct, env),
                (thin, issue_thin, revoke_thin, thin_env),
            ):
                started = time.perf_counter()
                session = json.loads(run([*command, "issue", "--task", str(work / "task.json"), "--json"], run_env))
                samples_issue.append(time.perf_counter() - started)
                started = time.perf_counter()
                run([*command, "revoke", "--session", session["session"]], run_env)
                samples_revoke.append(time.perf_counter() - started)
            started = time.perf_counter()
            _, document = http(sock, "POST", "/v1/sessions", TASK)
            issue_http.append(time.perf_counter() - started)
            started = time.perf_counter()
            http(sock, "DELETE", f"/v1/sessions/{document['session']}")
            revoke_http.append(time.perf_counter() - started)
        for name, samples in (
            ("issue, floor", issue_floor),
            ("issue, direct CLI", issue_direct),
            ("issue, thin client", issue_thin),
            ("issue, daemon answer", issue_http),
            ("revoke, floor", revoke_floor),
            ("revoke, direct CLI", revoke_direct),
            ("revoke, thin client", revoke_thin),
            ("revoke, daemon answer", revoke_http),
        ):
            figures[name] = statistics.median(samples) * 1000

        def cycle(_: int) -> bool:
            status, document = http(sock, "POST", "/v1/sessions", TASK)
            if status != 201:
                return False
            return http(sock, "DELETE", f"/v1/sessions/{document['session']}")[0] == 200

        started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(options.concurrent) as pool:
            results = list(pool.map(cycle, range(options.concurrent)))
        concurrent_ms = (time.perf_counter() - started) * 1000
        verified = subprocess.run([*direct, "audit", "verify"], capture_output=True, env=env).returncode == 0
        for index in range(10):
            cycle(index)
        rss_10 = rss_kib(daemon.pid)
        for index in range(options.cycles - 10):
            cycle(index)
        rss_n = rss_kib(daemon.pid)
        width = max(len(name) for name in figures)
        for name, value in figures.items():
            print(f"{name:<{width}}  {value:8.1f} ms")
        floor_issue, floor_revoke = figures["issue, floor"], figures["revoke, floor"]
        for kind, floor in (("issue", floor_issue), ("revoke", floor_revoke)):
            for way in ("direct CLI", "thin client", "daemon answer"):
                print(f"{kind} {way} / floor: {figures[f'{kind}, {way}'] / floor:.2f}x")
        cold = figures["status, thin client"] / figures["python -c pass"]
        print(f"cold start thin client / python -c pass: {cold:.2f}x")
        print(
            f"{options.concurrent} concurrent issue+revoke cycles: {concurrent_ms:.0f} ms,"
            f" {results.count(False)} failures, audit verify {'ok' if verified else 'FAILED'}"
        )
        print(f"daemon RSS after 10 cycles {rss_10} KiB, after {options.cycles}: {rss_n} KiB ({rss_n - rss_10:+d} KiB)")
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
        bao.terminate()
        bao.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
