"""Only a session's own proxy credential gets through the gateway, and every other gets the same 407.

A sandbox behind the gateway can send anything in ``Proxy-Authorization``: nothing, junk, a guessed secret,
its own secret under another session's id, a session id that was never issued, or the credential of a session
that expired or was revoked. Each gets one and the same answer (407, ``Proxy-Authenticate: Basic``, the same
body), nothing is sent upstream, and the operator's metrics count it by why (which the caller is never told).
"""

from __future__ import annotations

import re
import socket
import time

import pytest

from tests.fixtures.gateway import GatewayStack
from tests.fixtures.netns import unavailable

pytestmark = [pytest.mark.server, pytest.mark.root, pytest.mark.skipif(bool(unavailable()), reason=str(unavailable()))]
WAIT = 30.0


def answer_of(stack: GatewayStack, head: str, user: str | None, password: str | None) -> tuple[int, bytes]:
    status, answer, sock = stack.ask(head, user, password)
    sock.close()
    return status, answer


def unauthorized(metrics: str) -> dict[str, float]:
    return {
        match[1]: float(match[2])
        for match in re.finditer(r'broker_gateway_unauthorized_total\{reason="(\w+)"\} ([0-9.e+]+)', metrics)
    }


def scrape(stack: GatewayStack) -> str:
    """``GET /metrics`` on the daemon's socket (as root, who may read them there)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(stack.daemon.socket))
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while piece := sock.recv(65536):
            answer += piece
    assert answer.startswith(b"HTTP/1.1 200")
    return answer.decode()


def test_every_wrong_proxy_credential_gets_the_same_407_and_nothing_goes_upstream(
    hosted_gateway: GatewayStack,
) -> None:
    stack = hosted_gateway
    mine = stack.issue(stack.task("fix-gw-auth-a"))
    other = stack.issue(stack.task("fix-gw-auth-b"))
    secret, other_secret = stack.secret(mine), stack.secret(other)
    connect = f"CONNECT {stack.api_host}"
    before = len(stack.api.seen)
    asked = {
        "missing": (None, None),
        "wrong secret": (mine["session"], "x" * len(secret)),
        "another session's id": (other["session"], secret),
        "never issued": ("s-000000000000", secret),
        "no user": ("", secret),
        "another scheme": None,
    }
    answers = {}
    for case, credentials in asked.items():
        if credentials is None:  # a Bearer token where Basic belongs
            sock = stack.connect()
            sock.sendall(f"{connect} HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Bearer {secret}\r\n\r\n".encode())
            answers[case] = (int(sock.recv(65536).split(b" ", 2)[1]), b"")
            sock.close()
            continue
        answers[case] = answer_of(stack, connect, *credentials)
    statuses = {case: status for case, (status, _) in answers.items()}
    assert set(statuses.values()) == {407}, statuses
    bodies = {answer for case, (_, answer) in answers.items() if case != "another scheme"}
    assert len(bodies) == 1  # the same head and body whatever was wrong
    (only,) = bodies
    assert b'proxy-authenticate: Basic realm="broker gateway"' in only.lower().replace(b"basic", b"Basic")
    assert secret.encode() not in only and mine["session"].encode() not in only
    # The right one gets through (the tunnel opens), and a plain-HTTP request on the wrong one goes nowhere.
    status, _, sock = stack.ask(connect, mine["session"], secret)
    sock.close()
    assert status == 200
    assert answer_of(stack, f"GET http://{stack.api_host}/x", other["session"], secret)[0] == 407
    assert len(stack.api.seen) == before  # nothing reached the upstream
    assert other_secret != secret


def test_an_ended_sessions_credential_gets_407_too_and_each_reason_is_counted(hosted_gateway: GatewayStack) -> None:
    stack = hosted_gateway
    before = unauthorized(scrape(stack))
    revoked = stack.issue(stack.task("fix-gw-revoked"))
    expiring = stack.issue(stack.task("fix-gw-expiring", ttl="4s"))
    secrets = {document["session"]: stack.secret(document) for document in (revoked, expiring)}  # wiped at the end
    assert stack.revoke(revoked["session"]).code == 0
    deadline = time.monotonic() + WAIT
    while stack.records(expiring["session"], "session.expired") == [] and time.monotonic() < deadline:
        time.sleep(0.2)  # the gateway ends it at its expiry, not at the next sweep
    assert stack.records(expiring["session"], "session.expired"), "the expired session was not ended"
    connect = f"CONNECT {stack.api_host}"
    for document in (revoked, expiring):
        assert answer_of(stack, connect, document["session"], secrets[document["session"]])[0] == 407
    assert answer_of(stack, connect, None, None)[0] == 407
    assert answer_of(stack, connect, revoked["session"], "guess")[0] == 407
    after = unauthorized(scrape(stack))
    grew = {reason: after.get(reason, 0) - before.get(reason, 0) for reason in ("missing", "wrong", "ended")}
    assert grew == {"missing": 1, "wrong": 0, "ended": 3}
