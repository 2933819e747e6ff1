"""``broker serve`` refuses to start a gateway that would carry proxy credentials in the clear.

Off loopback the gateway speaks TLS only: a ``[gateway] listen`` on another
address without ``cert_file`` and ``key_file``, or with files that are no
certificate chain and key, stops ``broker serve`` before it listens anywhere
(not its socket, not the gateway's port), with one line naming the keys and
exit 2.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.net import free_port
from tests.fixtures.brokerenv import BrokerEnv


def serve(env: BrokerEnv) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "broker", "--config", str(env.config_path), "serve"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("address", ["10.231.0.1", "0.0.0.0"])
def test_serve_refuses_a_gateway_off_loopback_without_tls(broker_env: BrokerEnv, address: str) -> None:
    socket_path = broker_env.root / "broker.sock"
    broker_env.tables["daemon"] = {"socket": str(socket_path)}
    broker_env.tables["gateway"] = {"listen": f"{address}:3128", "advertise": "gateway.example:3128"}
    broker_env.write_config()
    done = serve(broker_env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "gateway.cert_file and gateway.key_file" in lines[0], done.stderr
    assert "is not a loopback address" in lines[0]
    assert not socket_path.exists()


def test_serve_refuses_a_certificate_that_does_not_load(broker_env: BrokerEnv, tmp_path: Path) -> None:
    socket_path = broker_env.root / "broker.sock"
    port = free_port()
    junk = tmp_path / "gateway.pem"
    junk.write_text("-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n")
    broker_env.tables["daemon"] = {"socket": str(socket_path)}
    broker_env.tables["gateway"] = {"listen": f"127.0.0.1:{port}", "cert_file": str(junk), "key_file": str(junk)}
    broker_env.write_config()
    done = serve(broker_env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].count("gateway.cert_file/gateway.key_file") == 1, done.stderr
    assert not socket_path.exists() and not listening(port)
