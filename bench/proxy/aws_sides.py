"""The two ends of the AWS figures: an upstream answering any SigV4 request, and the proxies in front of it.

The proxy runs in a child process of its own, as in a session: it terminates
TLS for one ``127.0.0.1:PORT`` with the session CA, and an AWS credential's
injector (``broker.egress.injectors.sigv4.resigner.Resigner``) verifies each request
with the placeholder keys and re-signs it with the "real" ones; every request
is an ``egress.request`` record on a real, signed issuance log. Beside it, the
same terminated path with no re-signing (a proxy whose credential these
requests do not hold). The upstream (another child) is a TLS HTTP/1.1 server
reading any framing with h11 and answering 200 without checking signatures:
the figures are the proxy's cost, not an AWS emulator's. Clients are
botocore's, with their defaults, or the raw requests botocore signs sent
again on a kept connection (``signed_requests``, ``connection``).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
from pathlib import Path
from typing import Any

from bench.proxy.gitpush import LINK
from bench.proxy.tunnels import Child

KEYS = {
    "placeholder": ["ASIAPLACEHOLDER00001", "p" * 40, "t" * 356],
    "real": ["ASIAREALKEYID0000001", "r" * 40, "R" * 356],
}

UPSTREAM = """
import sys, threading, h11
from datetime import UTC, datetime, timedelta
from pathlib import Path
from broker.egress.terminate.ca import SessionCA
import socket
ca = SessionCA(["127.0.0.1"], datetime.now(UTC) + timedelta(hours=2), label="bench aws upstream")
Path(sys.argv[1]).write_bytes(ca.pem)
context = ca.server_context("127.0.0.1")
listener = socket.create_server(("127.0.0.1", 0), backlog=64)
print(listener.getsockname()[1], flush=True)
BODY = b'<?xml version="1.0" encoding="UTF-8"?><Ok/>'
def serve(raw):
    try:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = context.wrap_socket(raw, server_side=True)
        conn = h11.Connection(h11.SERVER)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = sock.recv(1 << 20)
                if not data:
                    return
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request) and conn.they_are_waiting_for_100_continue:
                sock.sendall(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
            if isinstance(event, h11.EndOfMessage):
                headers = [("Content-Type", "application/xml"), ("Content-Length", str(len(BODY))), ("ETag", '"e"')]
                sock.sendall(conn.send(h11.Response(status_code=200, headers=headers)) + conn.send(h11.Data(data=BODY))
                             + conn.send(h11.EndOfMessage()))
                conn.start_next_cycle()
            if isinstance(event, h11.ConnectionClosed):
                return
    except Exception:
        return
def accept():
    while True:
        raw, _ = listener.accept()
        threading.Thread(target=serve, args=(raw,), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
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
from broker.egress.proxy.thread import proxy_thread
from broker.egress.injectors.sigv4 import AwsKeys
from broker.egress.injectors.sigv4.resigner import Resigner
from broker.egress.terminate.interceptor import Interceptor
from broker.egress.evidence.writer import EvidenceWriter
from broker.vocab.secret import Secret
spec = json.loads(sys.argv[1])
work = Path(spec["work"])
work.mkdir(parents=True, exist_ok=True)
port = spec["port"]
plan = Interceptor(lambda hosts: SessionCA(hosts, datetime.now(UTC) + timedelta(hours=1)),
                   upstream_ca_file=Path(spec["upstream_ca"]))
keys = {side: AwsKeys(k, Secret(s), Secret(t)) for side, (k, s, t) in spec["keys"].items()}
(work / "spool").mkdir(exist_ok=True)
if spec["resign"]:
    plan.add_injector(Resigner("store", frozenset({("127.0.0.1", port)}), keys["placeholder"], keys["real"],
                               upstream_ca_file=Path(spec["upstream_ca"]), spool_dir=work / "spool"))
else:  # the same terminated path with a credential whose placeholder these requests do not hold: no re-signing
    plan.add(Injection(frozenset({("127.0.0.1", port)}), Secret("ghs_" + "p" * 36), Secret("ghs_" + "s" * 36),
                       Path(spec["upstream_ca"]), name="other"))
(work / "session-ca.pem").write_bytes(plan.ca.pem)
log = IssuanceLog(work, load_or_create_keys(work / "audit.key", work / "fingerprint.key"))
writer = EvidenceWriter(log, session="s-aaaaaaaaaaaa", task="bench", requester="bench")
with proxy_thread((parse_destination(f"127.0.0.1:{port}"),), unix=False, tcp=True, interceptor=plan,
                   evidence=writer) as proxy:
    print(proxy.port, flush=True)
    sys.stdin.readline()
    status = Path("/proc/self/status").read_text()
    peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    print(json.dumps({"peak_rss_kib": peak, "written": writer.written}), flush=True)
    sys.stdin.read()
"""


class Sides:
    """The upstream (behind the modelled link when asked), the proxy for it, and a boto3 client per side."""

    def __init__(
        self, work: Path, *, delay: float = 0.0, rate: float = 0.0, window: int = 64 << 20, terminated: bool = False
    ) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.upstream = Child(UPSTREAM, str(work / "upstream-ca.pem"))
        self.link = Child(LINK, str(self.upstream.port), str(delay), str(rate), str(window)) if delay else None
        self.port = self.link.port if self.link is not None else self.upstream.port
        spec = {"port": self.port, "upstream_ca": str(work / "upstream-ca.pem"), "keys": KEYS}
        self.proxy = Child(PROXY, json.dumps({**spec, "work": str(work / "proxy"), "resign": True}))
        self.plain = (
            Child(PROXY, json.dumps({**spec, "work": str(work / "plain"), "resign": False})) if terminated else None
        )
        self.upstream_ca = work / "upstream-ca.pem"
        self.session_ca = work / "proxy" / "session-ca.pem"

    def client(self, service: str, side: str) -> Any:
        import boto3
        from botocore.config import Config

        key, secret, token = KEYS["placeholder"]
        proxy = {"proxied": self.proxy, "terminated": self.plain}.get(side)
        proxies = {"https": f"http://127.0.0.1:{proxy.port}"} if proxy is not None else None
        return boto3.session.Session(
            aws_access_key_id=key, aws_secret_access_key=secret, aws_session_token=token, region_name="us-east-1"
        ).client(
            service,
            endpoint_url=f"https://127.0.0.1:{self.port}",
            verify=str(self.ca_of(side)),
            config=Config(proxies=proxies, retries={"max_attempts": 1}, s3={"addressing_style": "path"}),
        )

    def ca_of(self, side: str) -> Path:
        """What a side's client trusts: the upstream's CA direct, a proxy's session CA through it."""
        if side == "direct":
            return self.upstream_ca
        return self.session_ca if side == "proxied" else self.session_ca.parent.parent / "plain" / "session-ca.pem"

    def peak_rss_mib(self) -> float:
        process = self.proxy.process
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write("\n")
        process.stdin.flush()
        return float(json.loads(process.stdout.readline())["peak_rss_kib"]) / 1024

    def close(self) -> None:
        for child in (self.proxy, self.plain, self.link, self.upstream):
            if child is not None:
                child.close()


def signed_requests(sides: Sides) -> dict[str, tuple[str, str, bytes, dict[str, str]]]:
    """The raw requests botocore sends for ``GetCallerIdentity`` and ``GetObject``, signed with the placeholder."""
    from botocore.awsrequest import AWSResponse

    found: dict[str, tuple[str, str, bytes, dict[str, str]]] = {}

    class Empty:
        def stream(self, **_: Any) -> Any:
            yield b""

    def keep(name: str) -> Any:
        def hook(request: Any, **_: Any) -> AWSResponse:
            path = request.url.split(str(sides.port), 1)[1] or "/"
            body = request.body if isinstance(request.body, bytes) else (request.body or "").encode()
            headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
            found[name] = (request.method, path, body, {"Host": f"127.0.0.1:{sides.port}", **headers})
            return AWSResponse(request.url, 200, {}, Empty())

        return hook

    sts, s3 = sides.client("sts", "direct"), sides.client("s3", "direct")
    sts.meta.events.register("before-send", keep("sts"))
    s3.meta.events.register("before-send", keep("s3"))
    for call in (sts.get_caller_identity, lambda: s3.get_object(Bucket="agent-bucket", Key="small")):
        with contextlib.suppress(Exception):  # the stand-in answer parses badly; only the request matters
            call()
    return found


def connection(sides: Sides, side: str) -> http.client.HTTPSConnection:
    if side == "direct":
        context = ssl.create_default_context(cafile=str(sides.upstream_ca))
        return http.client.HTTPSConnection("127.0.0.1", sides.port, context=context, timeout=60)
    proxy = sides.proxy if side == "proxied" else sides.plain
    assert proxy is not None
    context = ssl.create_default_context(cafile=str(sides.ca_of(side)))
    tunnel = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=context, timeout=60)
    tunnel.set_tunnel("127.0.0.1", sides.port)
    return tunnel
