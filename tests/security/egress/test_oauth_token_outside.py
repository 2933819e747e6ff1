"""An OAuth access token works from inside the sandbox and is never in it: the proxy puts it in, and only there.

The real parts: ``broker exec`` in bubblewrap (its own network namespace:
the proxy is the only way out), an authorisation server built with authlib
behind TLS, and an API that checks each bearer token by introspection at
that server. The sandbox holds a placeholder; the test collects every access
and refresh token the server ever issued and looks for each in everything the
sandbox could show (its files, its environment, what the API answered), and
checks that the token was revoked at the server when the command ended.
"""

from __future__ import annotations

import pytest
import requests

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.oauth import OAuthStack, oauth_task
from tests.fixtures.sandbox import sandbox_unavailable

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

INSIDE = r"""
token=$(cat /run/secrets/mcp/token)
echo "placeholder=$token"
echo "answer=$(curl -sS --noproxy '' -H "Authorization: Bearer $token" {url}/issues)"
curl -sS --noproxy '' -o /dev/null -w 'status=%{{http_code}}\n' -H "Authorization: Bearer $token" {url}/issues
echo "refresh=$(cat {refresh} 2>/dev/null || echo unreadable)"
echo "secret=$(cat {client_secret} 2>/dev/null || echo unreadable)"
curl -sS --noproxy '' -o /dev/null -w 'server=%{{http_code}}\n' {token_url} 2>/dev/null || echo "server=unreachable"
env
find /run/secrets -type f -exec cat {{}} +
"""


def test_the_sandbox_uses_the_token_through_the_proxy_and_never_holds_it(
    oauth_broker: BrokerEnv, oauth_stack: OAuthStack
) -> None:
    table = oauth_broker.providers["oauth"]
    script = INSIDE.format(
        url=oauth_stack.resource.resource,
        refresh=table["refresh_token_file"],
        client_secret=table["client_secret_file"],
        token_url=oauth_stack.server.token_url,
    )
    task = oauth_broker.write_task(oauth_task(oauth_stack))
    result = oauth_broker.run_process("exec", "--task", str(task), "--", "sh", "-c", script)
    assert result.code == 0, result.stderr
    values = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert values["status"] == "200"  # the API found the token active, for it, by introspection
    assert '"scope": "issues:read"' in values["answer"]
    assert values["refresh"] == "unreadable" and values["secret"] == "unreadable"
    assert values["server"] == "unreachable"  # the authorisation server is not a destination of the session
    issued = [token for token in oauth_stack.ledger.tokens.values() if token.client_id == "broker"]
    access = [token for token in issued if token.kind == "access_token"]
    assert len(access) == 1
    for token in issued:  # neither the access token nor any refresh token ever reached the sandbox
        assert token.value not in result.stdout + result.stderr
    placeholder = values["placeholder"]
    assert placeholder != access[0].value and len(placeholder) == len(access[0].value)
    # The placeholder is worthless at the API itself; the token was revoked when the command ended.
    direct = requests.get(
        oauth_stack.resource.resource + "/issues",
        headers={"Authorization": f"Bearer {placeholder}"},
        verify=str(oauth_stack.ca_file),
        timeout=10,
    )
    assert direct.status_code == 401
    assert access[0].revoked
    events = oauth_broker.events()
    assert "credential.issued" in events and "credential.revoked" in events
    assert placeholder not in "".join(str(record) for record in oauth_broker.log_records())
