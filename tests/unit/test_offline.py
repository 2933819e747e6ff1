"""The unit tests stay off the network: the guard of ``tests/unit/conftest.py`` stops a connection, a datagram, a
name lookup and the broker as a process in every test here, and under ``scripts/test --unit`` the whole run has
no network at all.
"""

from __future__ import annotations

import _socket
import errno
import os
import socket
import subprocess
import sys

import pytest

from tests.unit.conftest import NotAUnitTest, OffTheNetwork


def test_a_connection_over_ip_is_stopped_even_to_loopback() -> None:
    with pytest.raises(OffTheNetwork, match=r"connected to \('192\.0\.2\.1', 443\)"):
        socket.create_connection(("192.0.2.1", 443), timeout=1)
    with socket.socket() as sock, pytest.raises(OffTheNetwork):
        sock.connect(("127.0.0.1", 9))
    with socket.socket(socket.AF_INET6) as sock, pytest.raises(OffTheNetwork):
        sock.connect_ex(("::1", 9))


def test_a_datagram_and_a_name_lookup_are_stopped() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock, pytest.raises(OffTheNetwork):
        sock.sendto(b"x", ("192.0.2.1", 53))
    with pytest.raises(OffTheNetwork, match="looked up 'example.com'"):
        socket.getaddrinfo("example.com", 443)
    assert socket.getaddrinfo("127.0.0.1", 9)  # a literal address is no lookup


def test_binding_is_allowed_on_loopback_only() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # a free port number, for a provider table that must never answer
    with socket.socket() as sock, pytest.raises(OffTheNetwork):
        sock.bind(("0.0.0.0", 0))
    left, right = socket.socketpair()  # a Unix socket is no network
    left.close()
    right.close()


def test_the_broker_bubblewrap_and_servers_are_not_started() -> None:
    for argv in ([sys.executable, "-m", "broker", "--version"], [sys.executable, "-m", "broker.cli"], ["bwrap"]):
        with pytest.raises(NotAUnitTest):
            subprocess.run(argv, check=False)
    done = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True, check=True)
    assert done.stdout == "42\n"  # a child Python measuring an import or bounding CPU time is allowed


def test_every_test_here_is_marked_unit(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("server") is None and request.node.get_closest_marker("root") is None


@pytest.mark.skipif(
    os.environ.get("BROKER_TEST_NETWORK") != "unshared",
    reason="scripts/test --unit runs the unit tests in a network namespace of their own; this checks that run",
)
def test_the_unit_run_has_no_network_past_the_guard() -> None:
    assert socket.if_nameindex() == [(1, "lo")]  # no interface but a loopback
    for address in (("192.0.2.1", 443), ("127.0.0.1", 9)):  # the kernel's own socket, below the guard
        raw = _socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            with pytest.raises(OSError) as refused:
                raw.connect(address)
        finally:
            raw.close()
        assert refused.value.errno == errno.ENETUNREACH, refused.value  # not even the loopback is up
