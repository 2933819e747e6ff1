"""The processes of the terminated-host figures: a proxy with an Interceptor and evidence, a TLS upstream, a client.

``ProxyChild`` runs ``proxy_thread`` in a child process of its own, for one
``127.0.0.1:PORT`` it terminates (operations as given, a credential's header
swap when asked), with an ``EvidenceWriter`` on a real, signed issuance log
in its work directory (under the evidence budget given, or the default); it
prints its port, and the writer's figures when asked (then again once the
proxy stopped and wrote its last records). The
upstream is a TLS HTTP/1.1 server with keep-alive, its certificate from a
CA it makes (``SessionCA``). A client keeps one tunnel
(``HTTPSConnection.set_tunnel``), as gh and git do.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.proxy.tunnels import Child

#: The SPEC's operations, on the bench's loopback host (the port filled in).
RULE = {
    "github_api": {
        "hosts": ["127.0.0.1:{port}"],
        "allow": ["GET *", "POST /repos/*/*/pulls", "POST /repos/*/*/issues/*/comments"],
        "deny": ["PUT /repos/*/*/pulls/*/merge"],
        "graphql_mutations": ["addComment"],
    },
}
GH_PR_LIST = json.dumps(
    {
        "query": "query PullRequestList($owner: String!, $repo: String!) { repository(owner: $owner, name: $repo)"
        " { pullRequests(first: 30, states: OPEN) { nodes { number title headRefName author { login } } } } }",
        "variables": {"owner": "octo", "repo": "widgets"},
    }
).encode()

UPSTREAM = """
import json, sys, ssl, socket
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from broker.egress.terminate.ca import SessionCA
ca = SessionCA(["127.0.0.1"], datetime.now(UTC) + timedelta(hours=2), label="bench upstream")
Path(sys.argv[1]).write_bytes(ca.pem)
context = ca.server_context("127.0.0.1")
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # head and body are two writes: no delayed-ACK stall between them
    def _serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = b'{"data": {"repository": {"pullRequests": {"nodes": []}}}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = _serve
    def log_message(self, *args):
        return
class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    def get_request(self):
        sock, address = self.socket.accept()
        return context.wrap_socket(sock, server_side=True), address
server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
import threading
threading.Thread(target=server.serve_forever, daemon=True).start()
sys.stdin.read()
"""

PROXY = """
import json, sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from broker.audit.keys import load_or_create_keys
from broker.audit.log import IssuanceLog
from broker.egress.terminate.ca import SessionCA
from broker.egress.destinations import parse_destination
from broker.egress.injectors.swap import Injection
from broker.egress.operations import read_operations
from broker.egress.operations.checker import OperationsChecker
from broker.egress.proxy.thread import proxy_thread
from broker.egress.evidence.budget import EvidenceBudget
from broker.egress.terminate.interceptor import Interceptor
from broker.egress.evidence.writer import EvidenceWriter
from broker.vocab.errors import PolicyFileError
from broker.vocab.fields import Fields
from broker.vocab.secret import Secret
spec = json.loads(sys.argv[1])
work = Path(spec["work"])
work.mkdir(parents=True, exist_ok=True)
host, port = spec["host"], spec["port"]
plan = Interceptor(lambda hosts: SessionCA(hosts, datetime.now(UTC) + timedelta(hours=1)),
                   upstream_ca_file=Path(spec["upstream_ca"]))
if spec.get("operations"):
    document = json.loads(json.dumps(spec["operations"]).replace("{port}", str(port)))
    plan.limit(OperationsChecker(read_operations(Fields(document, "operations", PolicyFileError)), "bench"))
if spec.get("credential"):
    plan.add(Injection(frozenset({(host, port)}), Secret("ghs_" + "p" * 36), Secret("ghs_" + "s" * 36),
                       Path(spec["upstream_ca"]), name="repo"))
(work / "session-ca.pem").write_bytes(plan.ca.pem)
keys = load_or_create_keys(work / "audit.key", work / "fingerprint.key")
log = IssuanceLog(work, keys)
budget = EvidenceBudget(**spec["budget"]) if spec.get("budget") else None
writer = EvidenceWriter(log, session="s-aaaaaaaaaaaa", task="bench", requester="bench", budget=budget)
allow = tuple(parse_destination(a) for a in spec["allow"])
with proxy_thread(allow, unix=False, tcp=True, interceptor=plan, evidence=writer) as proxy:
    print(proxy.port, flush=True)
    sys.stdin.readline()
    stats = {"written": writer.written, "batches": writer.batches, "peak": writer.peak, "pending": writer.pending}
    print(json.dumps(stats), flush=True)
    sys.stdin.readline()
    started = __import__("time").perf_counter()
drained = __import__("time").perf_counter() - started
print(json.dumps({"written": writer.written, "batches": writer.batches, "peak": writer.peak,
                  "drain_s": drained}), flush=True)
sys.stdin.read()
"""


@dataclass
class Upstream:
    child: Child
    ca_file: Path


def upstream(work: Path) -> Upstream:
    """A TLS keep-alive upstream on 127.0.0.1 in a child process, its certificate from a CA it makes."""
    work.mkdir(parents=True, exist_ok=True)
    ca_file = work / "upstream-ca.pem"
    return Upstream(Child(UPSTREAM, str(ca_file)), ca_file)


class ProxyChild:
    """A proxy in a child process for ``127.0.0.1:port``: its ``port``, its session CA, the writer's figures."""

    def __init__(
        self,
        work: Path,
        port: int,
        upstream_ca: Path,
        *,
        operations: dict[str, Any] | None,
        credential: bool = True,
        budget: dict[str, int] | None = None,
    ) -> None:
        self.work = work
        spec = {
            "work": str(work),
            "host": "127.0.0.1",
            "port": port,
            "upstream_ca": str(upstream_ca),
            "operations": operations,
            "credential": credential,
            "allow": [f"127.0.0.1:{port}"],
            "budget": budget,  # the session's [egress] evidence_budget (None: the default)
        }
        self.child = Child(PROXY, json.dumps(spec))
        self.port = self.child.port
        self.ca_file = work / "session-ca.pem"

    def stats(self) -> dict[str, Any]:
        """The writer's figures now, then after the proxy stopped (which writes the last records)."""
        process = self.child.process
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write("\n")
        process.stdin.flush()
        live = json.loads(process.stdout.readline())
        process.stdin.write("\n")
        process.stdin.flush()
        final = json.loads(process.stdout.readline())
        return {"live": live, "final": final}

    def close(self) -> None:
        self.child.close()


def tunnel(proxy: ProxyChild | None, upstream_port: int, ca_file: Path) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(ca_file))
    if proxy is None:
        return http.client.HTTPSConnection("127.0.0.1", upstream_port, context=context, timeout=30)
    connection = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=context, timeout=30)
    connection.set_tunnel("127.0.0.1", upstream_port)
    return connection


def one(connection: http.client.HTTPSConnection, kind: str) -> float:
    headers = {"Authorization": "token ghs_" + "p" * 36, "Accept": "application/json"}
    start = time.perf_counter()
    if kind == "graphql":
        connection.request("POST", "/graphql", body=GH_PR_LIST, headers={**headers, "Content-Type": "application/json"})
    else:
        connection.request("GET", "/repos/octo/widgets/pulls?state=open&per_page=30", headers=headers)
    response = connection.getresponse()
    response.read()
    elapsed = time.perf_counter() - start
    assert response.status == 200, response.status
    return elapsed * 1000
