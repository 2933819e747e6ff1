"""One framing per request: a body framed twice cannot carry a request past the operations check.

The attack (request smuggling, CL.TE): inside the tunnel of a host the
operations limit, the sandbox sends an allowed ``POST .../comments`` with
both ``Transfer-Encoding: chunked`` and a ``Content-Length`` covering only
the chunk-size line, and a chunk that is a whole denied request, ``PUT
.../pulls/1/merge``. h11 reads the body as chunked, the operations check sees
the POST; an upstream that frames by ``Content-Length`` (the recording
upstream is Python's ``http.server``, which does) would read the merge as a
request of its own, which no check saw and no ``egress.request`` record
names. The proxy refuses such a request with 400 (``egress.refused`` reason
``framing``) and sends upstream only framing it wrote itself.

The sandbox side is a raw-socket client (CONNECT, TLS with the session's CA
bundle, bytes exactly as written) run by ``/usr/bin/python3`` inside
``broker exec --sandbox bwrap --network allowlist``; the other cases go
through the same proxy in process (``tests/fixtures/operations_stage.py``).
"""

from __future__ import annotations

import json
import socket
import ssl

import pytest

from tests.fixtures.limited_exec import LimitedExec, limited_exec
from tests.fixtures.operations_stage import API, PLAIN, Stage, stage
from tests.fixtures.sandbox import sandbox_unavailable

__all__ = ["limited_exec", "stage"]  # fixtures

MERGE = "/api/v3/repos/octo/widgets/pulls/1/merge"
COMMENTS = "/api/v3/repos/octo/widgets/issues/1/comments"

SMUGGLER = r"""
/usr/bin/python3 - <<'PY'
import os, socket, ssl, urllib.parse

proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
api, plain = (urllib.parse.urlsplit(os.environ[name]).netloc for name in ("API", "PLAIN"))

def received(sock):
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, OSError):
        pass
    return data

def answer(name, data):
    status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.1 ") else "none"
    print(f"{name}-status={status}")
    body = data.partition(b"\r\n\r\n")[2]
    print(f"{name}-body={body[:200]!r}")

def tunnel(authority):
    raw = socket.create_connection((proxy.hostname, proxy.port), timeout=20)
    raw.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += raw.recv(4096) or b"\r\n\r\nEOF"
    assert head.startswith(b"HTTP/1.1 200"), head
    return ssl.create_default_context().wrap_socket(raw, server_hostname=authority.rpartition(":")[0])

def body_framed_twice(method, target, authority, version="1.1"):
    smuggled = (f"PUT MERGE HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 7\r\n\r\n").encode()
    size_line = b"%x\r\n" % len(smuggled)  # what h11 writes upstream before the chunk; 7 = its last chunk, after
    return (
        f"{method} {target} HTTP/{version}\r\nHost: {authority}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(size_line)}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        + size_line + smuggled + b"\r\n0\r\n\r\n"
    )

# The control: the allowed comment as a client sends it, on its own framing.
with tunnel(api) as tls:
    body = b'{"body": "lgtm"}'
    tls.sendall(
        f"POST COMMENTS HTTP/1.1\r\nHost: {api}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
    )
    answer("control", received(tls))

# The attack: the merge in the body of the allowed comment; then the next request on the same connection.
with tunnel(api) as tls:
    tls.sendall(body_framed_twice("POST", "COMMENTS", api))
    answer("smuggle", received(tls))
    try:
        tls.sendall(f"GET /api/v3/user HTTP/1.1\r\nHost: {api}\r\n\r\n".encode())
        answer("next", received(tls))
    except OSError:
        print("next-status=closed")

# The same through the proxy as plain HTTP, to a host no operations limit.
with socket.create_connection((proxy.hostname, proxy.port), timeout=20) as raw:
    raw.sendall(body_framed_twice("POST", f"http://{plain}/upload", plain))
    answer("plain", received(raw))
PY
""".replace("MERGE", MERGE).replace("COMMENTS", COMMENTS)


@pytest.mark.server
@pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable()))
def test_a_merge_smuggled_in_an_allowed_comment_from_the_sandbox_never_reaches_upstream(
    limited_exec: LimitedExec,
) -> None:
    result = limited_exec.run(SMUGGLER)
    assert result.code == 0, result.stdout + result.stderr
    seen = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert seen["control-status"] == "201", result.stdout
    assert seen["smuggle-status"] == "400", result.stdout
    assert "Transfer-Encoding and Content-Length together" in seen["smuggle-body"]
    assert seen["next-status"] in ("closed", "none")  # the connection ends with the refusal
    assert seen["plain-status"] == "400", result.stdout
    # The upstream got the control comment alone, with the one framing the proxy wrote; the plain host nothing.
    assert limited_exec.api.requests() == [("POST", COMMENTS)]
    [control] = limited_exec.api.seen
    assert [(k.lower(), v) for k, v in control.headers if k.lower() in ("content-length", "transfer-encoding")] == [
        ("content-length", "16")
    ]
    assert limited_exec.plain.requests() == []
    # The evidence: the smuggling request is refused on its record, and no record names a merge allowed.
    records = [
        (r["method"], r["path"], r["decision"], r["status"], r["upstream_status"]) for r in limited_exec.records()
    ]
    assert records == [("POST", COMMENTS, "allowed", 201, 201), ("POST", COMMENTS, "refused", 400, None)]
    [refused] = [r for r in limited_exec.records() if r["decision"] == "refused"]
    assert "Transfer-Encoding and Content-Length together" in refused["reason"]
    counted = [
        (r["destination"], r["reason"], r["count"])
        for r in limited_exec.env.log_records()
        if r["event"] == "egress.refused"
    ]
    assert counted == [(limited_exec.authority(limited_exec.api), "framing", 1)]


# -- the same proxy in process: each framing h11 takes that an upstream could read otherwise ----------------------


def _exchange(stage: Stage, host: str, data: bytes) -> bytes:
    """``data`` on a tunnel to ``host`` through the stage's proxy (CONNECT, TLS with the session CA); all of the
    answer, up to the connection's end."""
    authority = f"{host}:{stage.ports[host]}"
    assert stage.proxy.port is not None
    with socket.create_connection(("127.0.0.1", stage.proxy.port), timeout=20) as raw:
        raw.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += raw.recv(4096) or b"\r\n\r\n"
        assert head.startswith(b"HTTP/1.1 200"), head
        context = ssl.create_default_context(cafile=stage.env["SSL_CERT_FILE"])
        with context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(data)
            answer = b""
            while chunk := tls.recv(65536):
                answer += chunk
    return answer


def _post(host: str, port: int, framing: str, body: bytes, version: str = "1.1") -> bytes:
    return (
        f"POST {COMMENTS} HTTP/{version}\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n{framing}"
        "Connection: close\r\n\r\n"
    ).encode() + body


CHUNKED_BODY = b'10\r\n{"body": "lgtm"}\r\n0\r\n\r\n'


@pytest.mark.parametrize(
    ("framing", "version"),
    [
        pytest.param("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", "1.1", id="cl-then-te"),
        pytest.param("Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", "1.1", id="te-then-cl"),
        pytest.param("Transfer-Encoding: chunked\r\nContent-Length: 0\r\n", "1.1", id="te-and-cl-0"),
        pytest.param("Transfer-Encoding: Chunked\r\nContent-Length: 40\r\n", "1.1", id="te-other-case"),
        pytest.param("Transfer-Encoding: chunked\r\n", "1.0", id="te-in-http-1.0"),
    ],
)
def test_a_body_framed_twice_is_refused_and_recorded_and_nothing_goes_upstream(
    stage: Stage, framing: str, version: str
) -> None:
    answer = _exchange(stage, API, _post(API, stage.ports[API], framing, CHUNKED_BODY, version))
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert b"a request has one framing" in answer
    assert stage.api.requests() == []
    [record] = stage.records(1)
    assert (record["method"], record["path"], record["decision"], record["status"]) == (
        "POST",
        COMMENTS,
        "refused",
        400,
    )
    assert record["upstream_status"] is None and "a request has one framing" in record["reason"]
    assert {str(k.reason): v for k, v in stage.proxy.denials().items() if not isinstance(k, str)} == {"framing": 1}


def test_plain_http_to_a_limited_host_with_a_body_framed_twice_is_refused(stage: Stage) -> None:
    port = stage.ports[PLAIN]
    assert stage.proxy.port is not None
    with socket.create_connection(("127.0.0.1", stage.proxy.port), timeout=20) as raw:
        raw.sendall(
            f"GET http://{PLAIN}:{port}/simple/ HTTP/1.1\r\nHost: {PLAIN}:{port}\r\n"
            "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            + CHUNKED_BODY
        )
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert stage.plain.requests() == []
    [record] = stage.records(1)
    assert (record["decision"], record["status"]) == ("refused", 400) and "one framing" in record["reason"]


def test_what_goes_upstream_is_framed_by_the_proxy_not_by_the_client_s_header(stage: Stage) -> None:
    body = json.dumps({"body": "lgtm"}).encode()
    framing = f"Content-Length: 000{len(body)}\r\n"  # h11 takes it; a server could read 0-led digits otherwise
    answer = _exchange(stage, API, _post(API, stage.ports[API], framing, body))
    assert answer.startswith(b"HTTP/1.1 201 "), answer
    [seen] = stage.api.seen
    assert seen.body == body
    framings = [(k.lower(), v) for k, v in seen.headers if k.lower() in ("content-length", "transfer-encoding")]
    assert framings == [("content-length", str(len(body)))]
