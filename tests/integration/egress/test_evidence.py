"""The ``egress.request`` evidence and the tunnel's keep-alive, with a client that writes its bytes by hand.

A raw client knows exactly what it sent, so the record's SHA-256 of the head
and body can be checked against it; it also sends several requests on one
tunnel (a refused push with its pack, then a read) to show the refusal
keeps the connection and the proxy keeps one connection upstream. The
evidence writer is then put under a log that stalls and one that fails:
the proxy waits (back-pressure) or refuses (fail closed), and no record is
ever dropped.
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h11
import pytest

from broker.audit.log import Entry
from broker.egress.evidence.writer import EvidenceWriter
from broker.vocab.errors import StoreError
from tests.fixtures.operations_stage import API, GIT, RULE, Stage, stage

__all__ = ["stage"]

ZERO, ONE = "0" * 40, "1" * 40


def pkt(text: str) -> bytes:
    data = text.encode()
    return b"%04x" % (len(data) + 4) + data


class RawTunnel:
    """A CONNECT tunnel through the proxy with TLS (the session CA), requests written by hand, answers read by h11."""

    def __init__(self, stage: Stage, host: str) -> None:
        port = stage.ports[host]
        assert stage.proxy.port is not None
        raw = socket.create_connection(("127.0.0.1", stage.proxy.port), timeout=20)
        raw.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += raw.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        context = ssl.create_default_context(cafile=stage.env["SSL_CERT_FILE"])
        self.tls = context.wrap_socket(raw, server_hostname=host)
        self.conn = h11.Connection(h11.CLIENT)
        self.authority = f"{host}:{port}"

    def head(self, method: str, target: str, headers: Sequence[tuple[str, str]] = ()) -> bytes:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.authority}", *(f"{k}: {v}" for k, v in headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def answer(self) -> tuple[int, bytes]:
        """The next answer's status and body (an informational 100 skipped)."""
        status, body = 0, b""
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                self.conn.receive_data(self.tls.recv(65536))
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return status, body
            elif isinstance(event, h11.ConnectionClosed):
                raise AssertionError("the proxy closed the tunnel")

    def exchange(self, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
        """Send ``head`` and ``body`` as they are; h11 is told the same request only to read the answer right."""
        method, target = head.split(b" ")[:2]
        self.conn.send(h11.Request(method=method, target=target, headers=[("host", self.authority)] + (
            [("content-length", str(len(body)))] if body else []
        )))  # fmt: skip
        if body:
            self.conn.send(h11.Data(data=body))
        self.conn.send(h11.EndOfMessage())
        self.tls.sendall(head + body)
        answered = self.answer()
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()  # the proxy kept the tunnel
        return answered


def push_body(ref: str, pack: int) -> bytes:
    caps = "\0 report-status side-band-64k object-format=sha1 agent=git/2.39.5"
    return pkt(f"{ZERO} {ONE} {ref}{caps}") + b"0000" + b"PACK" + bytes(pack)


def test_a_refused_push_keeps_the_tunnel_and_the_record_hashes_what_was_sent(stage: Stage) -> None:
    tunnel = RawTunnel(stage, GIT)
    body = push_body("refs/heads/main", 1024 * 1024)  # the pack follows the commands and is read and dropped
    push = tunnel.head(
        "POST",
        "/octo/widgets.git/git-receive-pack",
        [("Content-Type", "application/x-git-receive-pack-request"), ("Content-Length", str(len(body)))],
    )
    status, answer = tunnel.exchange(push, body)
    assert status == 200
    assert f"ng refs/heads/main refused by policy {RULE}".encode() in answer
    read = tunnel.head("GET", "/octo/widgets.git/info/refs?service=git-upload-pack")
    status, advertisement = tunnel.exchange(read)  # the same tunnel, after the refusal
    assert status == 200 and b"# service=git-upload-pack" in advertisement
    assert stage.git.pushes() == []
    refused, allowed = stage.records(2)
    assert refused["head_sha256"] == hashlib.sha256(push).hexdigest()
    assert refused["body_sha256"] == hashlib.sha256(body).hexdigest() and refused["body_complete"]
    assert refused["request_bytes"] == len(body) and refused["answer_bytes"] == len(answer)
    assert allowed["head_sha256"] == hashlib.sha256(read).hexdigest()
    assert allowed["body_sha256"] == hashlib.sha256(b"").hexdigest()
    assert (allowed["path"], allowed["decision"], allowed["upstream_status"]) == (
        "/octo/widgets.git/info/refs",
        "allowed",
        200,
    )


def test_requests_on_one_tunnel_share_one_connection_upstream(stage: Stage) -> None:
    tunnel = RawTunnel(stage, API)
    for number in range(5):
        status, _ = tunnel.exchange(tunnel.head("GET", f"/api/v3/repos/octo/widgets/issues/{number}"))
        assert status == 200
    refused, _ = tunnel.exchange(tunnel.head("PUT", "/api/v3/repos/octo/widgets/pulls/1/merge"))
    assert refused == 403
    status, _ = tunnel.exchange(tunnel.head("GET", "/api/v3/repos/octo/widgets"))
    assert status == 200
    assert len(stage.api.seen) == 6 and stage.api.connections == 1
    assert len(stage.records(7)) == 7


def test_a_request_naming_another_host_in_the_tunnel_is_refused_and_recorded(stage: Stage) -> None:
    tunnel = RawTunnel(stage, API)
    tunnel.tls.sendall(b"GET /api/v3/user HTTP/1.1\r\nHost: elsewhere.test\r\n\r\n")
    assert tunnel.answer()[0] == 400
    [record] = stage.records(1)
    assert (record["decision"], record["status"], record["upstream_status"]) == ("refused", 400, None)
    assert "exactly one Host header" in record["reason"] and record["rule"] is None
    assert stage.api.seen == []


class StallingLog:
    """An append-only log that holds every batch until released (``gate``), or fails while ``failing``."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.failing = False
        self.entries: list[Entry] = []
        self.appended = 0

    def append_many(self, entries: Sequence[Entry]) -> list[dict[str, Any]]:
        self.gate.wait(30)
        if self.failing:
            raise StoreError("issuance log: disk full")
        self.entries.extend(entries)
        return []


def all_submitted(writer: EvidenceWriter, count: int) -> None:
    """Wait until the proxy has handed ``count`` records to ``writer``: a request's record is submitted once its
    answer has gone out, so a client can read the answer a moment before its record reaches the writer."""
    deadline = time.monotonic() + 15
    while writer.pending + writer.written < count and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_stalled_log_holds_the_proxy_back_and_loses_no_record(stage: Stage) -> None:
    log = StallingLog()
    writer = EvidenceWriter(log, session="s-aaaaaaaaaaaa", task="t", requester="r", max_pending=3)  # type: ignore[arg-type]
    stage.proxy.proxy.evidence = writer
    done: list[int] = []

    def client() -> None:
        tunnel = RawTunnel(stage, API)
        for number in range(8):
            done.append(tunnel.exchange(tunnel.head("GET", f"/api/v3/issues/{number}"))[0])

    thread = threading.Thread(target=client)
    thread.start()
    deadline = time.monotonic() + 15
    while len(done) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1)
    # One record in the writer's hands, two more waiting: the tunnel reads no further request until there is room.
    assert len(done) == 3 and writer.pending == 3
    log.gate.set()
    thread.join(30)
    assert done == [200] * 8
    all_submitted(writer, 8)
    assert writer.close() == 0
    assert [e.fields["path"] for e in log.entries] == [f"/api/v3/issues/{n}" for n in range(8)]


def test_a_failing_log_makes_the_proxy_refuse_and_the_records_wait_for_it(stage: Stage) -> None:
    log = StallingLog()
    log.failing = True
    log.gate.set()
    writer = EvidenceWriter(log, session="s-aaaaaaaaaaaa", task="t", requester="r")  # type: ignore[arg-type]
    stage.proxy.proxy.evidence = writer
    tunnel = RawTunnel(stage, API)
    assert tunnel.exchange(tunnel.head("GET", "/api/v3/user"))[0] == 200  # the log fails only when written
    deadline = time.monotonic() + 10
    while writer.failing is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writer.failing == "issuance log: disk full"
    again = RawTunnel(stage, API)
    status, body = again.exchange(again.head("GET", "/api/v3/user"))
    assert status == 503 and b"the issuance log cannot take" in body
    assert [path for _, path in stage.api.requests()] == ["/api/v3/user"]  # the refused one never went
    all_submitted(writer, 2)
    log.failing = False
    assert writer.close() == 0
    assert [(e.fields["status"], e.fields["decision"]) for e in log.entries] == [(200, "allowed"), (503, "refused")]


@pytest.mark.parametrize("pieces", [1, 3])
def test_the_log_appends_many_records_as_one_chain(tmp_path: Path, pieces: int) -> None:
    from broker.audit.keys import load_or_create_keys
    from broker.audit.log import IssuanceLog
    from broker.audit.verify import verify_log

    keys = load_or_create_keys(tmp_path / "audit.key", tmp_path / "fp.key")
    log = IssuanceLog(tmp_path, keys)
    log.append("session.issued", session="s-aaaaaaaaaaaa", task="t", requester="r")
    entries = [Entry("egress.request", "s-aaaaaaaaaaaa", "t", "r", {"path": f"/{n}"}) for n in range(30)]
    size = len(entries) // pieces
    for start in range(0, len(entries), size):
        log.append_many(entries[start : start + size])
    log.checkpoint("r")
    result = verify_log(log.path, {keys.key_id: keys.private_key().public_key()})
    assert result.records == 32 and result.unsigned_tail == 0
