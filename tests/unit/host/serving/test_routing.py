"""The route table the daemon and a session's socket share: exact paths, ``{id}`` segments, nothing else."""

from __future__ import annotations

import pytest

from broker.host.serving.routing import Router

pytestmark = pytest.mark.unit

ROUTER = Router(
    [
        ("GET", "/v1/sessions", "list"),
        ("DELETE", "/v1/sessions/{id}", "revoke"),
        ("POST", "/v1/approvals/{id}/wait", "wait"),
    ]
)


def test_an_exact_path_and_a_template_are_found_with_their_values() -> None:
    found = ROUTER.find("GET", "/v1/sessions")
    assert found is not None and (found.value, found.template, found.params) == ("list", "/v1/sessions", {})
    found = ROUTER.find("POST", "/v1/approvals/s-4k2j9x7q3m1p/wait")
    assert found is not None and found.value == "wait"
    assert (found.template, found.params) == ("/v1/approvals/{id}/wait", {"id": "s-4k2j9x7q3m1p"})


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/sessions"),  # a known path, another method
        ("DELETE", "/v1/sessions/"),  # an empty segment
        ("DELETE", "/v1/sessions/a/b"),  # a segment is one segment
        ("DELETE", "/v1/sessions/" + "a" * 65),  # at most 64 characters
        ("POST", "/v1/approvals/x/wait/more"),
        ("GET", "/v1/sessionsX"),
    ],
)
def test_anything_else_is_not_found(method: str, path: str) -> None:
    assert ROUTER.find(method, path) is None


def test_a_route_declared_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        Router([("GET", "/v1/health", 1), ("GET", "/v1/health", 2)])
