"""``broker revoke`` cuts a gateway session at once: its open tunnels close, a new request gets 407.

A sandbox keeps a terminated tunnel open (keep-alive, as git and gh do) and
goes on sending requests with its placeholder. The revoke must not wait for
that tunnel, nor for the session's renewals: the tunnel is closed before the
revoke answers, and the proxy credential is refused from then on. Both ways
a revoke reaches the gateway are tried: through the daemon (the thin client),
and directly (a broker whose config names no daemon socket, which asks the
gateway's control socket, as it asks a running exec's).
"""

from __future__ import annotations

import os
import ssl
import sys
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import Result
from tests.fixtures.gateway import GatewayStack, InnerTLS, run
from tests.fixtures.netns import unavailable

pytestmark = [pytest.mark.server, pytest.mark.root, pytest.mark.skipif(bool(unavailable()), reason=str(unavailable()))]


def get(connection: InnerTLS, placeholder: str, host: str) -> bytes:
    """One keep-alive request on the tunnel; the answer's bytes (empty once the tunnel is closed)."""
    request = f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {placeholder}\r\n\r\n"
    try:
        connection.sendall(request.encode())
        return connection.recv(65536)
    except (OSError, ssl.SSLError):
        return b""


def direct_revoke(stack: GatewayStack, session: str, tmp_path: Path) -> Result:
    """``broker revoke`` in its own process with a config that names no daemon socket (no thin client)."""
    config = tmp_path / "direct.toml"
    text = stack.env.config_path.read_text()
    config.write_text(text.replace(f'socket = "{stack.daemon.socket}"', ""))
    assert "socket =" not in config.read_text()
    argv = [sys.executable, "-m", "broker", "--config", str(config), "revoke", "--session", session]
    return run(argv, {"PATH": os.environ["PATH"]})


@pytest.mark.parametrize("way", ["through the daemon", "directly"])
def test_revoke_closes_the_open_tunnel_and_refuses_the_credential_at_once(
    hosted_gateway: GatewayStack, way: str, tmp_path: Path
) -> None:
    stack = hosted_gateway
    document = stack.issue(stack.task(f"fix-gw-cut-{way.split()[0]}"))
    secret = stack.secret(document)
    placeholder = document["env"]["OPENAI_API_KEY"]
    connection = stack.tunnel(document)
    assert get(connection, placeholder, stack.api_host).startswith(b"HTTP/1.1 200")
    session = document["session"]
    revoked = stack.revoke(session) if way == "through the daemon" else direct_revoke(stack, session, tmp_path)
    assert revoked.code == 0, revoked.stderr
    seen = len(stack.api.seen)
    assert (
        get(connection, placeholder, stack.api_host) == b""
    )  # closed before the revoke answered: nothing more goes through it
    status, _, sock = stack.ask(f"CONNECT {stack.api_host}", document["session"], secret)
    sock.close()
    assert status == 407
    assert len(stack.api.seen) == seen
    events = [r["event"] for r in stack.env.log_records() if r.get("session") == document["session"]]
    assert "session.revoked" in events and events.index("egress.request") < events.index("session.revoked")
    assert not Path(document["dir"]).exists()
