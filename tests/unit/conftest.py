"""What makes a test a unit test: it runs in process, with no provider server, no root, no broker process, no
sandbox and no network.

Every test under ``tests/unit`` is marked ``unit``; one marked ``server`` or ``root`` stops the collection (it
belongs in ``tests/integration`` or ``tests/providers``). While a unit test runs, the guard below stops what a
unit test must not do: a connection or a datagram over IP (loopback too: a unit test talks to no server), a
name lookup, a bind outside loopback (binding loopback gives a free port number for a provider table that must
never answer), and starting the broker, bubblewrap or a provider server as a process. ``scripts/test --unit``
also runs these tests in a network namespace of their own, where nothing is reachable even past the guard.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
#: Programs a unit test may not start: the broker itself, the sandbox, and the servers of the local stack.
NOT_IN_A_UNIT_TEST = frozenset({"broker", "bwrap", "bao", "initdb", "pg_ctl", "postgres", "moto_server"})


class OffTheNetwork(BaseException):
    """A unit test reached for the network. A BaseException, so no ``except Exception`` in the code under test
    can swallow it and let the test pass."""


class NotAUnitTest(BaseException):
    """A unit test started the broker, bubblewrap or a server as a process."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE not in Path(str(item.path)).resolve().parents:
            continue
        for mark in ("server", "root"):
            if item.get_closest_marker(mark):
                raise pytest.UsageError(
                    f"{item.nodeid} is marked {mark}, so it is not a unit test: move it to tests/integration"
                    " (or tests/providers/<name> when it runs against one provider's server)"
                )
        item.add_marker(pytest.mark.unit)


def _is_ip(family: int) -> bool:
    return family in (socket.AF_INET, socket.AF_INET6)


def _loopback(address: Any) -> bool:
    host = str(address[0] if isinstance(address, tuple) else address)
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


def _literal(host: Any) -> bool:
    if host is None or host == "localhost":
        return True
    try:
        ipaddress.ip_address(host.decode() if isinstance(host, bytes) else str(host))
    except ValueError:
        return False
    return True


def _program(args: Any) -> list[str]:
    argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
    return [os.fsdecode(arg) if isinstance(arg, bytes | os.PathLike) else str(arg) for arg in argv]


@pytest.fixture(autouse=True)
def _off_the_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    connect, connect_ex, sendto, bind = (socket.socket.connect, socket.socket.connect_ex, socket.socket.sendto,
                                         socket.socket.bind)  # fmt: skip
    getaddrinfo, popen_init = socket.getaddrinfo, subprocess.Popen.__init__

    def guarded_connect(sock: socket.socket, address: Any) -> None:
        if _is_ip(sock.family):
            raise OffTheNetwork(f"a unit test connected to {address!r}: it belongs in tests/integration")
        connect(sock, address)

    def guarded_connect_ex(sock: socket.socket, address: Any) -> int:
        if _is_ip(sock.family):
            raise OffTheNetwork(f"a unit test connected to {address!r}: it belongs in tests/integration")
        return connect_ex(sock, address)

    def guarded_sendto(sock: socket.socket, data: Any, *rest: Any) -> int:
        if _is_ip(sock.family):
            raise OffTheNetwork(f"a unit test sent a datagram to {rest[-1]!r}: it belongs in tests/integration")
        return sendto(sock, data, *rest)

    def guarded_bind(sock: socket.socket, address: Any) -> None:
        if _is_ip(sock.family) and not _loopback(address):
            raise OffTheNetwork(f"a unit test bound {address!r}, outside loopback")
        bind(sock, address)

    def guarded_getaddrinfo(host: Any, *rest: Any, **named: Any) -> Any:
        if not _literal(host):
            raise OffTheNetwork(f"a unit test looked up {host!r}: a name lookup is the network")
        return getaddrinfo(host, *rest, **named)

    def guarded_popen(process: subprocess.Popen[Any], args: Any, *rest: Any, **named: Any) -> None:
        argv = _program(args)
        module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
        if Path(argv[0]).name in NOT_IN_A_UNIT_TEST or module.split(".")[0] == "broker":
            raise NotAUnitTest(f"a unit test started {' '.join(argv[:4])}: it belongs in tests/integration")
        popen_init(process, args, *rest, **named)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
    monkeypatch.setattr(socket.socket, "sendto", guarded_sendto)
    monkeypatch.setattr(socket.socket, "bind", guarded_bind)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
    monkeypatch.setattr(subprocess.Popen, "__init__", guarded_popen)
    yield
