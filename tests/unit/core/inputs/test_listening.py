"""``[gateway]``: where the gateway listens, read once and strictly; TLS is not optional off loopback.

A gateway carries every session's proxy credential: on an address other
sandboxes (or anyone on the network) can reach, it must speak TLS, so a
``listen`` off loopback without ``cert_file`` and ``key_file`` is a one-line
error naming them, and ``broker serve`` never starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.core.inputs.config import Config, load_config
from broker.core.inputs.listening import DEFAULT_GATEWAY_CONNECTIONS
from broker.vocab.errors import ConfigError

pytestmark = pytest.mark.unit
BASE = 'state_dir = "s"\nruntime_dir = "/run/b"\npolicy_dir = "p"\n[gateway]\n'
TLS = 'cert_file = "gw.pem"\nkey_file = "gw.key"\n'


def load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "broker.toml"
    path.write_text(BASE + text)
    return load_config(path)


def test_loopback_needs_no_tls_and_sessions_are_given_the_listen_address(tmp_path: Path) -> None:
    gateway = load(tmp_path, 'listen = "127.0.0.1:3128"\n').gateway
    assert gateway is not None and not gateway.tls
    assert gateway.listen == gateway.advertise == ("127.0.0.1", 3128)
    assert gateway.max_connections == DEFAULT_GATEWAY_CONNECTIONS


def test_tls_paths_are_the_config_files_and_advertise_names_the_gateway(tmp_path: Path) -> None:
    text = 'listen = "0.0.0.0:3128"\nadvertise = "gateway.example:3128"\nca_file = "ca.pem"\n' + TLS
    gateway = load(tmp_path, text).gateway
    assert gateway is not None and gateway.tls
    assert gateway.cert_file == tmp_path / "gw.pem" and gateway.key_file == tmp_path / "gw.key"
    assert gateway.ca_file == tmp_path / "ca.pem"
    assert gateway.advertise == ("gateway.example", 3128)
    v6 = load(tmp_path, 'listen = "[::]:3128"\nadvertise = "[fd00::1]:3128"\n' + TLS).gateway
    assert v6 is not None and v6.listen == ("::", 3128) and v6.advertise == ("fd00::1", 3128)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'listen = "10.89.0.1:3128"\n',
            "gateway.listen '10.89.0.1:3128' is not a loopback address: set gateway.cert_file and"
            " gateway.key_file (off loopback the gateway speaks TLS only)",
        ),
        ('listen = "0.0.0.0:3128"\nadvertise = "gw:3128"\n', "set gateway.cert_file and gateway.key_file"),
        ('listen = "10.89.0.1:3128"\ncert_file = "gw.pem"\n', "gateway.key_file: required with gateway.cert_file"),
        ('listen = "127.0.0.1:3128"\nkey_file = "gw.key"\n', "gateway.cert_file: required with gateway.key_file"),
        ('listen = "127.0.0.1:3128"\nca_file = "ca.pem"\n', "gateway.ca_file: only with gateway.cert_file"),
        ('listen = "0.0.0.0:3128"\n' + TLS, "gateway.advertise: required when gateway.listen is 0.0.0.0"),
        ('listen = "gateway:3128"\n', "gateway.listen: 'gateway:3128' is not ADDRESS:PORT"),
        ('listen = "127.0.0.1:0"\n', "gateway.listen: port '0' is not 1-65535"),
        ('listen = "127.0.0.1:3128"\nadvertise = "gw"\n', "gateway.advertise: 'gw' is not HOST:PORT"),
        ('listen = "127.0.0.1:3128"\nmax_connections = 0\n', "gateway.max_connections: must be at least 1"),
        ('listen = "127.0.0.1:3128"\nport = 3\n', "gateway.port"),
        ("", "gateway.listen: required"),
    ],
)
def test_a_bad_gateway_table_is_one_line_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, text)
    assert message in raised.value.message and "\n" not in raised.value.message
