"""``broker doctor``'s checks of an oauth instance against the real authorisation server: they never rotate the
refresh token (no refresh is tried), and introspection says whether it is still active."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.net import closed_port
from tests.fixtures.oauth import MakeOAuth, OAuthStack

pytestmark = pytest.mark.server


def checks(provider: object) -> dict[str, tuple[bool, str]]:
    return {check.name: (check.ok, check.detail) for check in provider.health()}  # type: ignore[attr-defined]


def test_a_healthy_instance_passes_and_its_refresh_token_is_left_as_it_was(
    make_oauth_provider: MakeOAuth, oauth_stack: OAuthStack
) -> None:
    provider = make_oauth_provider()
    file = provider.settings.refresh_token_file
    assert file is not None
    before = file.read_text()
    found = checks(provider)
    assert found["token_endpoint"][0] and "answers over verified TLS (HTTP 405)" in found["token_endpoint"][1]
    assert found["client_secret"][0]
    assert found["refresh_token"] == (True, found["refresh_token"][1])
    assert "says the refresh token in" in found["refresh_token"][1] and "is active" in found["refresh_token"][1]
    assert file.read_text() == before  # doctor never refreshes: the token is not rotated
    assert sum(oauth_stack.ledger.refreshes.values()) == 0 and oauth_stack.ledger.reuse_detections == 0


def test_a_revoked_refresh_token_fails_its_check(make_oauth_provider: MakeOAuth, oauth_stack: OAuthStack) -> None:
    provider = make_oauth_provider()
    file = provider.settings.refresh_token_file
    assert file is not None
    oauth_stack.ledger.revoke_family(oauth_stack.ledger.find(file.read_text().strip()).family)
    ok, detail = checks(provider)["refresh_token"]
    assert not ok and "is not active" in detail


def test_without_introspection_the_token_is_found_present_and_not_tried(
    make_oauth_provider: MakeOAuth, oauth_stack: OAuthStack
) -> None:
    ok, detail = checks(make_oauth_provider(introspection_url=None))["refresh_token"]
    assert ok and "not tried (a refresh would rotate it" in detail
    ok, detail = checks(make_oauth_provider(refresh_token_file="/nonexistent/rt", introspection_url=None))[
        "refresh_token"
    ]
    assert not ok


def test_an_unreachable_or_untrusted_endpoint_fails_the_first_check(
    make_oauth_provider: MakeOAuth, oauth_stack: OAuthStack, tmp_path: Path
) -> None:
    found = checks(make_oauth_provider(token_url=f"https://127.0.0.1:{closed_port()}/token"))
    assert list(found) == ["token_endpoint"] and "cannot be reached" in found["token_endpoint"][1]
    found = checks(make_oauth_provider(ca_file=None))
    assert found == {"token_endpoint": (False, found["token_endpoint"][1])}
    assert "certificate not trusted" in found["token_endpoint"][1]
