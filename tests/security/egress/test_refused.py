"""From inside a real sandbox, the attacks on a credential host's tunnel fail and leave ``egress.refused`` records.

``broker exec`` (direct, and through the daemon) runs a command in bubblewrap
with a Vault credential of ``inject: proxy``; OpenBao sits behind a TLS front
on ``127.0.0.1``. The command asks for response wrapping of
``lookup-self`` (whose wrapping token would unwrap anywhere to the real
token), names another virtual host in ``Host``, and speaks plain HTTP to the
credential host. Each is refused (or, for wrapping, answered unwrapped) and
the session's end writes one ``egress.refused`` record per kind of refusal.
"""

from __future__ import annotations

import json
import signal

import pytest

from tests.fixtures.daemon import Daemon, daemon
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.sandbox import sandbox_unavailable
from tests.integration.egress.test_inject_exec import Proxied, proxied
from tests.security.canaries.test_daemon import CI_READ, proxied_daemon

__all__ = ["daemon", "proxied", "proxied_daemon"]  # fixtures
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

ATTACKS = r"""
token="$(cat /run/secrets/kv/token)"
echo "== placeholder"; echo "$token"
echo "== wrapped"
curl -sS --noproxy '' -H "X-Vault-Token: $token" -H 'X-Vault-Wrap-TTL: 300' "$VAULT_ADDR/v1/auth/token/lookup-self"
echo; echo "== vhost"
curl -sS --noproxy '' -o /dev/null -w '%{http_code}\n' -H 'Host: other.test' -H "X-Vault-Token: $token" \
  "$VAULT_ADDR/v1/auth/token/lookup-self"
echo "== plain"
curl -sS --noproxy '' -w '\n%{http_code}\n' -H "X-Vault-Token: $token" \
  "http://${VAULT_ADDR#https://}/v1/auth/token/lookup-self"
exit 0  # every answer is checked by the test
"""


def _sections(stdout: str) -> dict[str, str]:
    parts = stdout.split("== ")[1:]
    return {name: text.strip() for name, _, text in (part.partition("\n") for part in parts)}


def _check(stdout: str, port: int, records: list[dict[str, object]]) -> None:
    seen = _sections(stdout)
    answer = json.loads(seen["wrapped"])
    assert answer["wrap_info"] is None, "a wrapping token came out of the proxy"
    assert answer["data"]["id"] == seen["placeholder"]  # unwrapped, the echo of the token masked as always
    assert seen["vhost"] == "400"
    body, _, status = seen["plain"].rpartition("\n")
    assert status == "403", seen["plain"]
    assert f"use https://127.0.0.1:{port}" in body
    [session] = {r["session"] for r in records if r["event"] == "credential.issued"}
    refused = [
        (r["session"], r["destination"], r["reason"], r["count"]) for r in records if r["event"] == "egress.refused"
    ]
    assert refused == [(session, f"127.0.0.1:{port}", "host", 1), (session, f"127.0.0.1:{port}", "plain-http", 1)]
    assert seen["placeholder"] not in json.dumps(records)


def _task_text(port: int) -> str:
    """The Vault task with ``inject: proxy`` and ``ci-write``, a policy that may read ``lookup-self``."""
    return VAULT_TASK.replace("credentials:", f'network:\n  allow: ["127.0.0.1:{port}"]\ncredentials:').replace(
        "    policies: [ci-read]", "    policies: [ci-write]\n    inject: proxy"
    )


def test_exec_s_sandbox_gets_no_wrapping_token_no_other_vhost_and_no_plain_http(
    proxied: Proxied, openbao: OpenBao
) -> None:
    lookup = 'path "auth/token/lookup-self" { capabilities = ["read"] }'
    openbao.client().sys.create_or_update_policy("ci-write", f"{CI_READ}\n{lookup}")  # as test_canaries_daemon
    task = proxied.env.write_task(_task_text(proxied.port))
    result = proxied.env.run_process("exec", "--task", str(task), "--", "sh", "-c", ATTACKS)
    assert result.code == 0, result.stderr
    _check(result.stdout, proxied.port, proxied.env.log_records())
    assert proxied.env.run_process("audit", "verify").code == 0


def test_through_the_daemon_the_same_attacks_fail_and_are_recorded(
    proxied_daemon: tuple[Daemon, int], openbao: OpenBao
) -> None:
    daemon, port = proxied_daemon
    daemon.start()
    result = daemon.client("exec", "--task", str(daemon.task(_task_text(port))), "--", "sh", "-c", ATTACKS)
    assert result.code == 0, result.stderr
    assert daemon.stop(signal.SIGTERM) == 0
    _check(result.stdout, port, daemon.env.log_records())
