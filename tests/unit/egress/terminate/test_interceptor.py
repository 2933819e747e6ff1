"""``Interceptor.relimit``: a running session's operations replaced (``session allow``) only within its CA."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from broker.egress.destinations import parse_destination
from broker.egress.operations import Operations
from broker.egress.operations.checker import OperationsChecker
from broker.egress.operations.model import HttpOperations
from broker.egress.terminate.ca import SessionCA
from broker.egress.terminate.interceptor import Interceptor


def read_only(*hosts: str) -> OperationsChecker:
    sections = tuple(HttpOperations(parse_destination(host), ("GET",), ()) for host in hosts)
    return OperationsChecker(Operations(http=sections), "limited")


def made(hosts: list[str]) -> Interceptor:
    interceptor = Interceptor(lambda names: SessionCA(names, datetime.now(UTC) + timedelta(minutes=5)))
    interceptor.limit(read_only(*hosts))
    assert interceptor.ca.hosts  # made at issue, for the hosts it terminates then
    return interceptor


def test_operations_on_hosts_the_session_ca_covers_apply_at_once() -> None:
    interceptor = made(["127.0.0.1:8443", "api.example.com:443"])
    assert interceptor.relimit(read_only("127.0.0.1:9000", "api.example.com:443")) == []
    assert interceptor.limited("127.0.0.1", 9000)  # the CA names the address, whatever the port
    assert interceptor.relimit(None) == [] and not interceptor.limited("127.0.0.1", 9000)


def test_a_host_outside_the_session_ca_changes_nothing() -> None:
    interceptor = made(["api.example.com:443"])
    before = interceptor.operations
    assert interceptor.relimit(read_only("api.example.com:443", "other.example.com:443")) == ["other.example.com"]
    assert interceptor.operations is before


def test_a_session_that_terminated_nothing_has_no_ca_to_cover_a_new_host() -> None:
    interceptor = Interceptor(lambda names: SessionCA(names, datetime.now(UTC) + timedelta(minutes=5)))
    assert not interceptor.terminates
    assert interceptor.relimit(read_only("127.0.0.1:9000")) == ["127.0.0.1"]
    assert interceptor.operations is None
