"""The gateway figures: one ``broker serve`` gateway holding 1,000 live sessions, and what it adds per request.

Part of ``scripts/bench`` (``--only gateway``; ``--quick`` makes it small), or alone:
``python -m bench.serving.gateway [--quick]``. It starts its own OpenBao dev server, a TLS keep-alive upstream
(``bench/proxy/proxychild.py``, its certificate from a CA it makes) and ``broker serve`` with ``[gateway] listen``
on loopback (no TLS to the gateway, as the per-session proxy's figure has none to the proxy). Every session is a
Vault ``kind: secret`` behind a placeholder for the upstream (``Authorization: Bearer``): the gateway terminates
TLS for it with the session's CA, puts the key in and writes an ``egress.request`` record per request into the
issuance log, as a real session's proxy does.

- Sessions: N sessions issued with ``--gateway`` through the daemon's socket (4 at a time); the daemon's RSS
  before the first and with all N live (goal: 1,000 within 200 MiB), its threads and open descriptors.
- Latency and CPU, one session active (with the N sessions live): a keep-alive tunnel through the gateway, a
  keep-alive tunnel through a per-session proxy (``ProxyChild``: last round's shape, a header swap and evidence,
  in a process of its own) and a direct keep-alive connection to the upstream, request by request in rotating
  order; the figures are the added medians (goal: the gateway adds at most 1 ms) and each proxy's CPU per
  request (its process's user+system time over its requests; goal: the gateway at most 0.5 ms).
- 100 sessions active at once: one tunnel per session, driven by client processes for a fixed time, then the
  same number of direct connections for the same time (alternating, two rounds each): requests/s, latency
  median and p90 both ways, and the gateway's CPU per request under that load.

The load average at the start and end is reported beside the figures (the machine is shared).
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import http.client as client_http
import json
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import PYTHON, Report, Row, Settings, process_cpu
from bench.proxy.proxychild import ProxyChild, Upstream, upstream
from bench.serving.daemon import http, wait
from devstack.net import free_port
from devstack.openbao import ROOT_TOKEN, start_openbao, stop_openbao

KEY = "sk-proj-" + "k" * 56
PATH = "/repos/octo/widgets/pulls?state=open&per_page=30"

CLIENT = """
import base64, http.client, json, ssl, sys, time
spec = json.loads(sys.argv[1])
connections = []
for session in spec["sessions"]:
    context = ssl.create_default_context(cafile=spec["ca"] if spec["direct"] else session["ca"])  # its session CA
    if spec["direct"]:
        connection = http.client.HTTPSConnection("127.0.0.1", spec["upstream"], context=context, timeout=60)
    else:
        connection = http.client.HTTPSConnection("127.0.0.1", spec["gateway"], context=context, timeout=60)
        token = base64.b64encode((session["id"] + ":" + session["secret"]).encode()).decode()
        connection.set_tunnel("127.0.0.1", spec["upstream"], headers={"Proxy-Authorization": "Basic " + token})
    connections.append((connection, session["placeholder"]))
latencies, errors, first = [], 0, None
sys.stdout.write("ready\\n"); sys.stdout.flush(); sys.stdin.readline()
deadline = time.monotonic() + spec["seconds"]
while time.monotonic() < deadline:
    for connection, placeholder in connections:
        started = time.perf_counter()
        try:
            connection.request("GET", spec["path"], headers={"Authorization": "Bearer " + placeholder})
            answer = connection.getresponse(); answer.read()
            ok = answer.status == 200
        except Exception as exc:
            ok = False
            first = first or repr(exc)
        if ok:
            latencies.append((time.perf_counter() - started) * 1000)
        else:
            errors += 1
print(json.dumps({"latencies": latencies, "errors": errors, "first": first}), flush=True)
"""


def task(port: int, name: str) -> dict[str, Any]:
    return {
        "version": 1,
        "task": name,
        "ttl": "1h",
        "sandbox": {"uid": 1000, "gid": 1000, "mount_path": "/run/secrets"},
        "network": {"allow": [f"127.0.0.1:{port}"]},
        "credentials": [
            {
                "name": "service", "provider": "vault", "kind": "secret", "path": "bench/service", "field": "key",
                "inject": "proxy", "hosts": [f"127.0.0.1:{port}"], "header": "Authorization: Bearer {}",
                "env": "SERVICE_KEY",
            }
        ],
    }  # fmt: skip


def policy(port: int) -> str:
    return f"""rules:
  - id: bench
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    max_ttl: 2h
    network: ["127.0.0.1:{port}"]
    grants:
      - provider: vault
        secret_paths: ["bench/*"]
        secret_hosts: ["127.0.0.1:{port}"]
        secret_headers: ["Authorization: Bearer {{}}"]
"""


def status(pid: int) -> dict[str, int]:
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "Threads"):
            found[name] = int(value.split()[0])
    found["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return found


def issue(sock: Path, port: int, count: int) -> list[dict[str, str]]:
    """``count`` gateway sessions: each one's id, proxy secret and placeholder."""

    def one(index: int) -> dict[str, str]:
        code, document = http(sock, "POST", "/v1/gateway/sessions", {"manifest": task(port, f"fix-gw-{index}")})
        if code != 201:
            raise RuntimeError(f"bench.serving.gateway: issue --gateway answered {code}: {document}")
        secret = (Path(document["dir"]) / "proxy" / "credential").read_text()
        return {"id": document["session"], "secret": secret, "placeholder": document["env"]["SERVICE_KEY"]}

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, range(count)))


def tunnel(port: int, upstream_port: int, ca: Path, session: dict[str, str] | None) -> client_http.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(ca))
    if session is None:
        return client_http.HTTPSConnection("127.0.0.1", upstream_port, context=context, timeout=60)
    connection = client_http.HTTPSConnection("127.0.0.1", port, context=context, timeout=60)
    headers = {}
    if "secret" in session:
        token = base64.b64encode(f"{session['id']}:{session['secret']}".encode()).decode()
        headers["Proxy-Authorization"] = f"Basic {token}"
    connection.set_tunnel("127.0.0.1", upstream_port, headers=headers)
    return connection


def one(connection: client_http.HTTPSConnection, placeholder: str) -> float:
    started = time.perf_counter()
    connection.request("GET", PATH, headers={"Authorization": f"Bearer {placeholder}"})
    answer = connection.getresponse()
    answer.read()
    elapsed = (time.perf_counter() - started) * 1000
    if answer.status != 200:
        raise RuntimeError(f"bench.serving.gateway: a request answered {answer.status}")
    return elapsed


def single(daemon: int, gw_port: int, up: Upstream, session: dict[str, str], per_session: ProxyChild,
           requests: int) -> dict[str, Any]:  # fmt: skip
    """One session's keep-alive tunnel: gateway, per-session proxy, direct; rotating order, request by request."""
    sides = {
        "direct": (tunnel(0, up.child.port, up.ca_file, None), session["placeholder"]),
        "gateway": (tunnel(gw_port, up.child.port, session["ca"], session), session["placeholder"]),  # type: ignore[arg-type]
        "per-session proxy": (
            tunnel(per_session.port, up.child.port, per_session.ca_file, {"id": ""}),
            "ghs_" + "p" * 36,
        ),
    }
    samples: dict[str, list[float]] = {side: [] for side in sides}
    cpu = {"gateway": 0.0, "per-session proxy": 0.0}

    def cpu_now() -> dict[str, float]:
        return {"gateway": process_cpu(daemon), "per-session proxy": per_session.child.cpu()}

    before: dict[str, float] = {}
    for number in range(requests + 50):
        if number == 50:  # warmed up: connections open, leaves made, code paths hot
            before = cpu_now()
        order = list(sides) if number % 2 else list(reversed(sides))
        for side in order:
            connection, placeholder = sides[side]
            elapsed = one(connection, placeholder)
            if number >= 50:
                samples[side].append(elapsed)
    time.sleep(0.5)  # the last records written
    after = cpu_now()
    cpu = {side: after[side] - before[side] for side in cpu}  # neither proxy works for the other sides' requests
    for connection, _ in sides.values():
        connection.close()
    medians = {side: statistics.median(values) for side, values in samples.items()}
    return {
        "requests": requests,
        "median_ms": {side: round(value, 3) for side, value in medians.items()},
        "added_median_ms": {side: round(medians[side] - medians["direct"], 3) for side in cpu},
        "cpu_ms_per_request": {side: round(seconds * 1000 / requests, 3) for side, seconds in cpu.items()},
    }


@dataclass
class Load:
    """One side of the many-sessions figure, summed over its rounds."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0
    cpu: float = 0.0  # the daemon's
    first: str | None = None  # the first error a client saw

    def summary(self) -> dict[str, Any]:
        latencies = sorted(self.latencies)
        return {
            "requests": len(latencies),
            "errors": self.errors,
            "first_error": self.first,
            "per_second": round(len(latencies) / self.seconds, 1) if self.seconds else None,
            "median_ms": round(statistics.median(latencies), 3) if latencies else None,
            "p90_ms": round(latencies[int(len(latencies) * 0.9)], 3) if latencies else None,
            "daemon_cpu_ms_per_request": round(self.cpu * 1000 / max(len(latencies), 1), 3),
        }


def active(daemon: int, gw_port: int, up: Upstream, sessions: list[dict[str, str]], seconds: float,
           processes: int = 4) -> dict[str, Any]:  # fmt: skip
    """``len(sessions)`` tunnels at once (one per session) for ``seconds``, then as many direct connections;
    two rounds each, alternating."""
    found = {"gateway": Load(), "direct": Load()}
    for round_number in range(4):
        side = ("gateway", "direct")[round_number % 2]
        clients = []
        for part in range(processes):
            chunk = sessions[part::processes]
            spec = {"sessions": chunk, "direct": side == "direct", "gateway": gw_port, "upstream": up.child.port,
                    "ca": str(up.ca_file), "seconds": seconds, "path": PATH}  # fmt: skip
            clients.append(subprocess.Popen([PYTHON, "-c", CLIENT, json.dumps(spec)], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True))  # fmt: skip
        for client in clients:
            assert client.stdout is not None and client.stdout.readline().strip() == "ready"
        load = found[side]
        before = process_cpu(daemon)
        started = time.perf_counter()
        for client in clients:
            assert client.stdin is not None
            client.stdin.write("go\n")
            client.stdin.flush()
        for client in clients:
            out, _ = client.communicate(timeout=seconds + 120)
            result = json.loads(out.strip().splitlines()[-1])
            load.latencies += result["latencies"]
            load.errors += result["errors"]
            load.first = load.first or result["first"]
        load.seconds += time.perf_counter() - started
        load.cpu += process_cpu(daemon) - before
    return {
        "sessions": len(sessions),
        "seconds_each": seconds,
        **{side: load.summary() for side, load in found.items()},
    }


def measure(quick: bool) -> dict[str, Any]:
    count, requests, at_once, seconds = (100, 200, 20, 3.0) if quick else (1000, 2000, 100, 10.0)
    work = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    runtime = Path(tempfile.mkdtemp(prefix="broker-bench-gateway-", dir="/dev/shm"))  # a tmpfs: no mount per session
    bao = start_openbao()
    up = upstream(work / "upstream")
    per_session: ProxyChild | None = None
    daemon: subprocess.Popen[bytes] | None = None
    load_start = [round(x, 2) for x in os.getloadavg()]
    try:
        bao.client().secrets.kv.v2.create_or_update_secret(path="bench/service", secret={"key": KEY})
        (work / "policies").mkdir()
        (work / "policies" / "bench.yaml").write_text(policy(up.child.port))
        (work / "vault-token").write_text(ROOT_TOKEN)
        (work / "vault-token").chmod(0o600)
        sock, gw_port = work / "broker.sock", free_port()
        (work / "broker.toml").write_text(
            f'state_dir = "{work}/state"\nruntime_dir = "{runtime}"\npolicy_dir = "{work}/policies"\n'
            f'audit_key = "{work}/audit.key"\nmount_tmpfs = "never"\n'
            f'[audit]\nmin_free = "1MiB"\n[egress]\nupstream_ca_file = "{up.ca_file}"\n'
            f'[daemon]\nsocket = "{sock}"\n[gateway]\nlisten = "127.0.0.1:{gw_port}"\n'
            f'[providers.vault]\ntype = "vault"\naddr = "{bao.addr}"\ntoken_file = "{work}/vault-token"\n'
        )
        daemon = subprocess.Popen(
            [PYTHON, "-m", "broker", "--config", str(work / "broker.toml"), "serve"], stderr=subprocess.DEVNULL
        )
        wait(lambda: sock.exists(), "the daemon")
        idle = status(daemon.pid)
        started = time.perf_counter()
        sessions = issue(sock, up.child.port, count)
        issued_s = time.perf_counter() - started
        time.sleep(2)
        held = status(daemon.pid)
        for session in sessions:
            session["ca"] = str(runtime / session["id"] / "ca-bundle.pem")
        per_session = ProxyChild(work / "per-session", up.child.port, up.ca_file, operations=None)
        one_active = single(daemon.pid, gw_port, up, sessions[0], per_session, requests)
        many_active = active(daemon.pid, gw_port, up, sessions[:at_once], seconds)
    finally:
        if per_session is not None:
            per_session.close()
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(300)
        up.child.close()
        stop_openbao(bao)
        if not os.environ.get("KEEP"):
            shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)
    return {
        "sessions": count,
        "issue_seconds": round(issued_s, 1),
        "daemon_idle": idle,
        "daemon_holding": held,
        "one_active": one_active,
        "many_active": many_active,
        "loadavg_start": load_start,
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
    }


def add_rows(found: dict[str, Any], report: Report) -> None:
    count, held, idle = found["sessions"], found["daemon_holding"], found["daemon_idle"]
    rss = held["VmRSS"] / 1024
    load = f"load {found['loadavg_start'][0]} -> {found['loadavg_end'][0]}"
    report.add(
        Row(
            "gateway", f"gateway: daemon RSS holding {count:,} live sessions", round(rss, 1), "MiB",
            "<= 200 MiB (1,000)", rss <= 200 if count >= 1000 else None,
            f"(idle {idle['VmRSS'] / 1024:.1f} MiB; threads {idle['Threads']} -> {held['Threads']};"
            f" fds {idle['fds']} -> {held['fds']}; issued in {found['issue_seconds']} s; {load})", found,
        )
    )  # fmt: skip
    single_found = found["one_active"]
    added, cpu = single_found["added_median_ms"], single_found["cpu_ms_per_request"]
    medians = single_found["median_ms"]
    report.add(
        Row(
            "gateway", "gateway: added latency per keep-alive request, terminated host", added["gateway"], "ms",
            "<= 1 ms", added["gateway"] <= 1,
            f"(median {medians['gateway']} vs direct {medians['direct']} ms; the per-session proxy adds"
            f" {added['per-session proxy']} ms; {count:,} sessions live; {load})", found,
        )
    )  # fmt: skip
    report.add(
        Row(
            "gateway", "gateway: CPU per terminated request", cpu["gateway"], "ms", "<= 0.5 ms",
            cpu["gateway"] <= 0.5, f"(the per-session proxy: {cpu['per-session proxy']} ms; {load})", found,
        )
    )  # fmt: skip
    many = found["many_active"]
    gateway, direct = many["gateway"], many["direct"]
    report.add(
        Row(
            "gateway", f"gateway: {many['sessions']} sessions active at once, CPU per request",
            gateway["daemon_cpu_ms_per_request"], "ms", "<= 0.5 ms", gateway["daemon_cpu_ms_per_request"] <= 0.5,
            f"({gateway['per_second']} requests/s, median {gateway['median_ms']} ms, p90 {gateway['p90_ms']} ms,"
            f" {gateway['errors']} errors; direct {direct['per_second']}/s, median {direct['median_ms']} ms;"
            f" {load})", found,
        )
    )  # fmt: skip


def figure_gateway(settings: Settings, report: Report) -> None:
    add_rows(measure(settings.quick), report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args()
    found = measure(options.quick)
    add_rows(found, Report())
    print(json.dumps(found, indent=1, default=str))


if __name__ == "__main__":
    main()
