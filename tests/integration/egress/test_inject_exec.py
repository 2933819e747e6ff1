"""``inject: proxy`` through ``broker exec``: the sandbox holds a placeholder, curl works with the hints alone.

OpenBao sits behind a TLS front on ``127.0.0.1`` (an IP literal: no multi-label name resolves to loopback here) (a test CA, the provider's
``upstream_ca_file``); the sandbox has its own network namespace, so the
only way to OpenBao is the session's proxy, which puts the real token in.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.openbao import ROOT_TOKEN, VAULT_TASK, OpenBao
from tests.fixtures.sandbox import sandbox_unavailable, vault_egress_policy
from tests.fixtures.tls import TLSFront, backend_port, make_test_ca

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]


# curl ignores NO_PROXY here only because the test's upstream is 127.0.0.1, which the hints exempt.
INSIDE = r"""
echo "placeholder=$(cat /run/secrets/kv/token)"
echo "addr=$VAULT_ADDR"
echo "bundle=$CURL_CA_BUNDLE"
curl -sS --noproxy '' -H "X-Vault-Token: $(cat /run/secrets/kv/token)" "$VAULT_ADDR/v1/secret/data/ci/build" \
  | /usr/bin/python3 -c 'import json, sys; print("value=" + json.load(sys.stdin)["data"]["data"]["value"])'
"""


@dataclass
class Proxied:
    env: BrokerEnv
    port: int


@pytest.fixture
def proxied(tmp_path: Path, openbao: OpenBao) -> Iterator[Proxied]:
    (tmp_path / "ca").mkdir()
    test_ca = make_test_ca(tmp_path / "ca", ["vault.test"])
    front = TLSFront(test_ca.context, backend_port(openbao.addr))
    env = make_env(tmp_path)
    token_file = env.write_secret("vault-token", ROOT_TOKEN)
    env.add_provider(
        "vault",
        {
            "type": "vault",
            "addr": openbao.addr,
            "token_file": str(token_file),
            "token_role": "broker-session",
            "proxy_hosts": [f"127.0.0.1:{front.port}"],
            "upstream_ca_file": str(test_ca.cert_file),
        },
    )
    env.write_policy(vault_egress_policy(front.port))
    try:
        yield Proxied(env, front.port)
    finally:
        env.cleanup()
        front.close()


def proxied_task(env: BrokerEnv, port: int, *, inject: str = "proxy") -> Path:
    text = VAULT_TASK.replace("credentials:", f'network:\n  allow: ["127.0.0.1:{port}"]\ncredentials:').replace(
        "    policies: [ci-read]", f"    policies: [ci-read]\n    inject: {inject}"
    )
    return env.write_task(text)


def test_the_sandbox_holds_a_placeholder_and_the_proxy_puts_the_token_in(proxied: Proxied, openbao: OpenBao) -> None:
    openbao.client().secrets.kv.v2.create_or_update_secret(path="ci/build", secret={"value": "kept-in-vault"})
    task = proxied_task(proxied.env, proxied.port)
    result = proxied.env.run_process("exec", "--task", str(task), "--", "sh", "-c", INSIDE)
    assert result.code == 0, result.stderr
    values = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert values["addr"] == f"https://127.0.0.1:{proxied.port}"
    assert values["bundle"] == "/run/secrets/ca-bundle.pem"
    assert values["value"] == "kept-in-vault"
    placeholder = values["placeholder"]
    assert placeholder.startswith(("hvs.", "s."))
    # The placeholder is worthless at OpenBao itself.
    direct = requests.get(
        openbao.addr + "/v1/auth/token/lookup-self", headers={"X-Vault-Token": placeholder}, timeout=10
    )
    assert direct.status_code == 403
    issued = [r for r in proxied.env.log_records() if r["event"] == "credential.issued"]
    accessor = issued[0]["reference"]["accessor"]
    assert not openbao.accessor_exists(accessor)  # revoked when the command ended
    assert placeholder not in "".join(str(r) for r in proxied.env.log_records())


def test_inject_proxy_without_a_proxy_is_refused_before_anything_is_minted(proxied: Proxied) -> None:
    task = proxied_task(proxied.env, proxied.port)
    result = proxied.env.run_process("issue", "--task", str(task))
    assert result.code == 2
    assert "inject: proxy" in result.stderr
    result = proxied.env.run_process("exec", "--task", str(task), "--network", "host", "--", "true")
    assert result.code == 2
    assert "--network allowlist" in result.stderr
    assert "credential.issued" not in proxied.env.events()


def test_a_proxy_host_outside_the_network_allow_list_is_refused(proxied: Proxied) -> None:
    task = proxied_task(proxied.env, proxied.port)
    task.write_text(task.read_text().replace(f'["127.0.0.1:{proxied.port}"]', '["127.0.0.2:443"]'))
    result = proxied.env.run_process("issue", "--task", str(task))
    assert result.code == 2
    assert "network.allow must list" in result.stderr
