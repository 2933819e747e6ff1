"""The ``oauth`` provider through ``broker exec``: a token renewed behind its placeholder while the command runs,
and what a broken instance or manifest does (one line, the exit code of the hierarchy, nothing minted).

The authorisation server (authlib, TLS, loopback) issues access tokens that
live nine seconds here, so a command of fourteen seconds outlives two of
them: the session's rotation mints the next one (a refresh of the operator's
token, its successor written back) before each ends, the proxy swaps it in
behind the same placeholder, and the old one is revoked at the server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.net import closed_port
from tests.fixtures.oauth import OAuthStack, oauth_env, oauth_task
from tests.fixtures.sandbox import sandbox_unavailable

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

LOOP = r"""
for i in $(seq 14); do
  token=$(cat /run/secrets/mcp/token)
  status=$(curl -sS --noproxy '' -o /dev/null -w '%{{http_code}}' -H "Authorization: Bearer $token" {url}/issues)
  echo "$i $status $token"
  sleep 1
done
"""


def test_a_token_is_refreshed_behind_the_same_placeholder_while_the_command_runs(
    oauth_broker: BrokerEnv, oauth_stack: OAuthStack
) -> None:
    oauth_stack.server.access_lifetime = 9
    refresh_file = Path(str(oauth_broker.providers["oauth"]["refresh_token_file"]))
    first_refresh = refresh_file.read_text().strip()
    task = oauth_broker.write_task(oauth_task(oauth_stack))
    script = LOOP.format(url=oauth_stack.resource.resource)
    result = oauth_broker.run_process("exec", "--task", str(task), "--", "sh", "-c", script, timeout=90)
    assert result.code == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert len(rows) == 14
    assert {status for _, status, _ in rows} == {"200"}, result.stdout  # no request failed across the renewals
    assert len({placeholder for _, _, placeholder in rows}) == 1  # one placeholder for the whole command
    ledger = oauth_stack.ledger
    access = [token for token in ledger.tokens.values() if token.kind == "access_token"]
    assert len(access) >= 3  # the first token and at least two renewals, each one refresh
    assert sum(ledger.refreshes.values()) == len(access)
    assert ledger.reuse_detections == 0 and ledger.races == 0
    assert all(token.revoked for token in access)  # each old one at its renewal, the last at the end
    assert oauth_broker.events().count("credential.renewed") == len(access) - 1
    kept = refresh_file.read_text().strip()
    assert kept != first_refresh and not ledger.find(kept).replaced  # the file holds the family's live token


def test_a_token_endpoint_that_cannot_be_reached_is_named_and_nothing_is_minted(
    tmp_path: Path, oauth_stack: OAuthStack
) -> None:
    url = f"https://127.0.0.1:{closed_port()}/token"
    env = oauth_env(tmp_path, oauth_stack, token_url=url)
    try:
        task = env.write_task(oauth_task(oauth_stack))
        result = env.run_process("exec", "--task", str(task), "--", "true")
        assert result.code == 4, result.stderr
        line = result.stderr.strip()
        assert "\n" not in line
        assert f"oauth oauth: the token endpoint {url} cannot be reached (ConnectionError)" in line
        assert "credential.issued" not in env.events()
    finally:
        env.cleanup()


def test_a_revoked_refresh_token_is_named_and_nothing_is_minted(tmp_path: Path, oauth_stack: OAuthStack) -> None:
    env = oauth_env(tmp_path, oauth_stack)
    try:
        refresh_file = Path(str(env.providers["oauth"]["refresh_token_file"]))
        family = oauth_stack.ledger.find(refresh_file.read_text().strip()).family
        oauth_stack.ledger.revoke_family(family)  # the operator's authorisation withdrawn, or expired
        task = env.write_task(oauth_task(oauth_stack))
        result = env.run_process("exec", "--task", str(task), "--", "true")
        assert result.code == 2, result.stderr
        line = result.stderr.strip()
        assert "\n" not in line
        assert f"refused the refresh token in {refresh_file} (invalid_grant" in line
        assert "the operator must put a new one there" in line
        assert not oauth_stack.ledger.live("access_token")
        assert "credential.issued" not in env.events()
    finally:
        env.cleanup()


def test_a_scope_outside_the_grant_is_denied_naming_it(oauth_broker: BrokerEnv, oauth_stack: OAuthStack) -> None:
    task = oauth_broker.write_task(oauth_task(oauth_stack, scopes="[issues:read, repo:admin]"))
    result = oauth_broker.run_process("exec", "--task", str(task), "--", "true")
    assert result.code == 3, result.stderr
    assert "scopes[1]: 'repo:admin' is not granted" in result.stderr
    assert sum(oauth_stack.ledger.grants.values()) == 0


def test_an_oauth_token_as_a_file_is_refused_before_anything_is_minted(
    oauth_broker: BrokerEnv, oauth_stack: OAuthStack
) -> None:
    task = oauth_broker.write_task(oauth_task(oauth_stack, inject="file"))
    for command in (["issue", "--task", str(task)], ["exec", "--task", str(task), "--", "true"]):
        result = oauth_broker.run_process(*command)
        assert result.code == 2, result.stderr
        assert "credentials[0].inject: OAuth tokens go only by the proxy (inject: proxy)" in result.stderr
    assert sum(oauth_stack.ledger.grants.values()) == 0
