"""The issuer's documents on ``broker serve``'s socket: the well-known routes, and ``broker identity ...`` as a thin
client printing what the direct command prints. Any peer may read them: they are public."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.daemon import STRANGER_UID, Daemon, daemon

__all__ = ["daemon"]  # fixture

pytestmark = [pytest.mark.server, pytest.mark.root]


def test_the_daemon_publishes_the_issuers_documents_to_any_peer(daemon: Daemon) -> None:
    daemon.env.tables["identity"] = {"issuer": "https://broker.example.com/tenant"}
    daemon.env.write_config()
    daemon.start()
    direct = json.loads(daemon.env.run_process("identity", "jwks").stdout)
    through = daemon.client("identity", "jwks", uid=STRANGER_UID)
    assert through.code == 0, through.stderr
    assert json.loads(through.stdout) == direct and direct["keys"][0]["alg"] == "ES256"
    status, discovery = daemon.request("GET", "/.well-known/openid-configuration")
    assert status == 200 and discovery["issuer"] == "https://broker.example.com/tenant"
    assert discovery["jwks_uri"] == "https://broker.example.com/tenant/.well-known/jwks.json"
    status, revoked = daemon.request("GET", "/.well-known/revoked")
    assert (status, revoked["revoked"]) == (200, [])
    assert json.loads(daemon.client("identity", "discovery").stdout) == discovery


def test_a_daemon_that_is_no_issuer_says_so(daemon: Daemon) -> None:
    daemon.start()
    result = daemon.client("identity", "jwks")
    assert result.code == 2
    assert "this broker is no issuer: set [identity] issuer" in result.stderr
