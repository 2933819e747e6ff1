"""Revoking a session whose sandbox is using AWS through the proxy: every request to the AWS hosts is refused at
once, whatever AWS itself still accepts.

The provider revokes with ``revoke = "expire"`` here: nothing is written at AWS, so the session's real STS keys
stay valid at moto until they expire, the case where the deny policy has not landed (or never will). The
sandbox reads its identity again and again through the proxy; the test sends the same placeholder-signed
request through the session proxy's socket, the way the sandbox does, before and after ``broker revoke``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from devstack.aws import REGION
from tests.fixtures.aws_proxied import AwsProxied, py
from tests.fixtures.net import connect_unix
from tests.fixtures.sandbox import sandbox_unavailable
from tests.integration.egress.test_revoke import _proxy_socket

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

LOOP = py(
    """
import time
import boto3
from botocore.exceptions import ClientError

sts = boto3.client("sts")
while True:
    try:
        sts.get_caller_identity()
        code = "200"
    except ClientError as error:
        code = str(error.response["ResponseMetadata"]["HTTPStatusCode"])
    except Exception:
        code = "failed"
    with open("/workspace/codes", "a") as codes:
        codes.write(code + "\\n")
    time.sleep(0.2)
"""
)
WAIT = 60.0


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.05)


def _placeholder(credentials: Path) -> Credentials:
    values = dict(line.split(" = ", 1) for line in credentials.read_text().splitlines() if " = " in line)
    return Credentials(values["aws_access_key_id"], values["aws_secret_access_key"], values["aws_session_token"])


def _signed_request(port: int, keys: Credentials) -> bytes:
    """A GetCallerIdentity signed with ``keys`` as botocore signs it, as raw HTTP/1.1."""
    body = b"Action=GetCallerIdentity&Version=2011-06-15"
    request = AWSRequest("POST", f"https://127.0.0.1:{port}/", data=body)
    request.headers["Content-Type"] = "application/x-www-form-urlencoded; charset=utf-8"
    SigV4Auth(keys, "sts", REGION).add_auth(request)
    head = ["POST / HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Length: {len(body)}", "Connection: close"]
    head += [f"{name}: {value}" for name, value in request.headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _through_proxy(socket_path: str, port: int, trust: ssl.SSLContext, request: bytes) -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.settimeout(20)
        connect_unix(raw, socket_path)  # a path past sun_path's 108 bytes, through its directory
        raw.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        head = raw.recv(4096)
        if not head.startswith(b"HTTP/1.1 200"):
            return int(head.split()[1])
        with trust.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(request)
            return int(tls.recv(4096).split()[1])


def test_after_revoke_every_request_to_the_aws_hosts_is_refused_at_once(
    aws_proxied: AwsProxied, tmp_path: Path
) -> None:
    env, port = aws_proxied.env, aws_proxied.port
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    broker = [sys.executable, "-m", "broker.cli", "--config", str(env.config_path)]
    argv = [*broker, *aws_proxied.argv(aws_proxied.task(), LOOP, "--workspace", str(workspace))]
    running = subprocess.Popen(argv, env=aws_proxied.process_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    codes = workspace / "codes"
    try:
        _wait_for(lambda: codes.exists() and "200" in codes.read_text().split(), "the sandbox reaching STS")
        session = next(r for r in env.log_records() if r["event"] == "credential.issued")["session"]
        keys = _placeholder(env.runtime_dir / session / "store" / "credentials")
        trust = ssl.create_default_context(cafile=str(env.runtime_dir / session / "ca.pem"))
        socket_path = _proxy_socket(running.pid)
        assert socket_path is not None
        assert _through_proxy(socket_path, port, trust, _signed_request(port, keys)) == 200

        revoked = subprocess.run(
            [*broker, "revoke", "--session", session],
            env=aws_proxied.process_env(),
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )
        assert revoked.returncode == 0, revoked.stderr
        # Nothing was written at AWS (revoke = "expire"), and yet nothing signed for the session gets through.
        with pytest.raises(OSError):
            status = _through_proxy(socket_path, port, trust, _signed_request(port, keys))
            if status == 403:
                raise ConnectionRefusedError("refused")
            raise AssertionError(f"the proxy still answered {status}")
        assert running.wait(timeout=WAIT) == 128 + 15  # the sandboxed command is stopped with SIGTERM
    finally:
        if running.poll() is None:
            running.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                running.wait(timeout=WAIT)
    events = [r["event"] for r in env.log_records()]
    assert "credential.revoked" in events and "session.revoked" in events
