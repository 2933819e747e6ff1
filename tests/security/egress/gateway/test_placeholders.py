"""One session's placeholder is worthless on another session's proxy credential.

Two sessions of the gateway hold placeholders for the same service key. A
sandbox that learns session A's placeholder (from a log, another sandbox)
and sends it on its own credential (session B) gets nothing for it: B's
proxy knows only B's placeholder, so A's goes out as the string it is, and
the service sees no key. B's own placeholder still works.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.gateway import GatewayStack
from tests.fixtures.netns import unavailable

pytestmark = [pytest.mark.server, pytest.mark.root, pytest.mark.skipif(bool(unavailable()), reason=str(unavailable()))]


def send(stack: GatewayStack, on: dict[str, Any], placeholder: str, path: str) -> bytes:
    """A request to the service through ``on``'s session, carrying ``placeholder``; the answer's head."""
    tls = stack.tunnel(on)
    try:
        tls.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {stack.api_host}\r\nAuthorization: Bearer {placeholder}\r\n\r\n".encode()
        )
        return tls.recv(65536)
    finally:
        tls.close()


def test_another_sessions_placeholder_goes_out_as_the_string_it_is(hosted_gateway: GatewayStack) -> None:
    stack = hosted_gateway
    a = stack.issue(stack.task("fix-gw-holder-a"))
    b = stack.issue(stack.task("fix-gw-holder-b"))
    placeholder_a, placeholder_b = a["env"]["OPENAI_API_KEY"], b["env"]["OPENAI_API_KEY"]
    assert placeholder_a != placeholder_b
    assert send(stack, b, placeholder_a, "/v1/stolen").startswith(b"HTTP/1.1 200")
    assert send(stack, b, placeholder_b, "/v1/own").startswith(b"HTTP/1.1 200")
    seen = {s.path: {name.lower(): value for name, value in s.headers} for s in stack.api.seen}
    assert seen["/v1/stolen"]["authorization"] == f"Bearer {placeholder_a}"  # not swapped: no key went out
    assert seen["/v1/own"]["authorization"] == f"Bearer {stack.key}"
    for session in (a, b):
        stack.revoke(session["session"])
