"""The issuer's documents on ``broker serve``'s socket: the well-known routes, and ``broker identity ...`` as a thin
client printing what the direct command prints. Any peer may read them: they are public."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from devstack.net import free_port
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


def test_the_gateway_publishes_the_issuers_documents_where_its_issuer_url_points(daemon: Daemon) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/tenant"  # the gateway is the issuer's host: verifiers fetch from it
    daemon.env.tables["gateway"] = {"listen": f"127.0.0.1:{port}"}
    daemon.env.tables["identity"] = {"issuer": url}
    daemon.env.write_config()
    daemon.start()
    direct = json.loads(daemon.env.run_process("identity", "jwks").stdout)

    def get(path: str) -> tuple[int, dict[str, str], Any]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("GET", path)  # no proxy credential: these documents are public
            answer = connection.getresponse()
            return answer.status, {k.lower(): v for k, v in answer.getheaders()}, json.loads(answer.read())
        finally:
            connection.close()

    status, headers, discovery = get("/tenant/.well-known/openid-configuration")
    assert (status, discovery["issuer"], discovery["jwks_uri"]) == (200, url, f"{url}/.well-known/jwks.json")
    assert headers["cache-control"] == "public, max-age=300"
    status, _, keys = get("/tenant/.well-known/jwks.json")
    assert status == 200 and keys == direct
    status, headers, revoked = get("/tenant/.well-known/revoked")
    assert (status, revoked["revoked"], headers["cache-control"]) == (200, [], "no-store")
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/.well-known/jwks.json")  # not under the issuer's path: not its document
    assert connection.getresponse().status == 404
    connection.close()
