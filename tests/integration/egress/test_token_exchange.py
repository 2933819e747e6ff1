"""A ``token_exchange`` credential through ``broker exec``: a session's token exchanged (RFC 8693) for an access
token that stays in the proxy and is renewed behind the same placeholder.

The token endpoint is authlib's authorisation server with an RFC 8693 grant
(``devstack.identity.token_exchange``), verifying the subject token against
the broker's JWKS fetched from ``jwks_url`` (the issuer's documents served
as a listener serves them) and a trust policy on its ``sub``; the model API
behind TLS answers who a bearer token was issued to. The sandbox (bubblewrap,
its own network namespace) reaches the API only through the session's proxy,
with the placeholder alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import pytest

from broker.core.broker import Broker
from broker.core.inputs.config import load_config
from broker.vocab.errors import ManifestError, ProviderError
from broker.vocab.fields import Fields
from devstack.identity.token_exchange import ExchangeServer, fingerprint, start_token_exchange
from tests.fixtures.aws_sts import context
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.identity import IssuerServer, add_issuer
from tests.fixtures.sandbox import sandbox_unavailable
from tests.fixtures.tls import make_test_ca

pytestmark = [pytest.mark.root, pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable()))]
AUDIENCE = "https://api.model.example"
LIFETIME = 9  # the endpoint's access tokens: renewed by the running exec at 5 s, ended at 9 s


@dataclass
class Exchanging:
    env: BrokerEnv
    server: IssuerServer
    endpoint: ExchangeServer

    def task(self, inject: str = "proxy") -> Path:
        return self.env.write_task(
            f"""
version: 1
task: fix-model-1
ttl: 5m
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
network:
  allow: ["127.0.0.1:{self.endpoint.api_port}"]
credentials:
  - {{name: model, provider: modelx, inject: {inject}, scopes: [inference]}}
"""
        )


@pytest.fixture
def exchanging(tmp_path: Path) -> Iterator[Exchanging]:
    env = make_env(tmp_path)
    server = add_issuer(env)
    (tmp_path / "ca").mkdir()
    ca = make_test_ca(tmp_path / "ca", ["api.model.test"])
    subjects = ["task:fix-*:session:s-*", "broker:*"]
    endpoint = start_token_exchange(
        server.url, AUDIENCE, subjects, ca.context, jwks_url=server.url + "/.well-known/jwks.json", lifetime=LIFETIME
    )
    env.add_provider(
        "modelx",
        {
            "type": "token_exchange",
            "token_endpoint": endpoint.token_url,
            "audience": AUDIENCE,
            "client_id": "broker",
            "jwks_url": server.url + "/.well-known/jwks.json",
            "proxy_hosts": [f"127.0.0.1:{endpoint.api_port}"],
            "upstream_ca_file": str(ca.cert_file),
        },
    )
    env.write_policy(
        f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["127.0.0.1:{endpoint.api_port}"]
    grants:
      - provider: modelx
        scopes: [inference]
"""
    )
    try:
        yield Exchanging(env, server, endpoint)
    finally:
        endpoint.stop()
        server.close()
        env.cleanup()


def inside(port: int) -> str:
    ask = (
        f"curl -sS --noproxy '' -H \"Authorization: Bearer $(cat /run/secrets/model/token)\""
        f" https://127.0.0.1:{port}/v1/me"
    )
    return (
        f'echo "placeholder=$(cat /run/secrets/model/token)"; echo "first=$({ask})"; sleep 11; echo "second=$({ask})"'
    )


def test_the_exchanged_token_stays_in_the_proxy_and_is_renewed_behind_its_placeholder(exchanging: Exchanging) -> None:
    env, endpoint = exchanging.env, exchanging.endpoint
    argv = ["exec", "--task", str(exchanging.task()), "--sandbox", "bwrap", "--network", "allowlist"]
    result = env.run_process(*argv, "--", "sh", "-c", inside(endpoint.api_port), timeout=120)
    assert result.code == 0, result.stderr
    values = dict(line.split("=", 1) for line in result.stdout.splitlines())
    first, second = json.loads(values["first"]), json.loads(values["second"])
    assert first["sub"].startswith("task:fix-model-1:session:s-") and second["sub"] == first["sub"]
    granted = [e for e in endpoint.exchanges if not e["refused"]]
    assert len(granted) >= 2  # the first one ended at 9 s: the second request went with its renewal
    assert values["placeholder"] not in endpoint.issued  # the sandbox never held a token the API takes
    assert fingerprint(values["placeholder"]) not in {e["token"] for e in granted}
    assert [r["accepted"] for r in endpoint.requests] == [True, True]
    records = env.log_records()
    assert any(r["event"] == "credential.renewed" and r["credential"] == "model" for r in records)
    subject_tokens = {r["jti"] for r in records if r["event"] == "identity.token"}
    assert {e["jti"] for e in granted} <= subject_tokens  # every subject token sent is a record: its jti
    dumped = json.dumps(records)
    assert not any(token in dumped for token in endpoint.issued)


def test_an_exchanged_token_is_never_a_file(exchanging: Exchanging) -> None:
    result = exchanging.env.run_process("issue", "--task", str(exchanging.task(inject="file")))
    assert result.code == 2
    assert "credentials[0].inject: Exchanged tokens go only by the proxy (inject: proxy)" in result.stderr
    assert exchanging.endpoint.exchanges == []


def test_doctor_compares_the_endpoints_keys_and_makes_a_test_exchange(exchanging: Exchanging) -> None:
    result = exchanging.env.run_process("doctor", "--json")
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["providers.modelx.keys"]["ok"], checks["providers.modelx.keys"]
    assert checks["providers.modelx.exchange"]["ok"], checks["providers.modelx.exchange"]
    assert exchanging.endpoint.exchanges[-1]["subject"].startswith("broker:")


def test_a_clock_the_endpoint_refuses_is_named_with_the_fix(exchanging: Exchanging) -> None:
    broker = Broker.open(load_config(exchanging.env.config_path))
    try:
        assert broker.issuer is not None
        ahead = broker.clock() + timedelta(minutes=10)
        broker.issuer.clock = lambda: ahead
        provider = broker.config.providers["modelx"]
        fields = Fields({}, "credentials[0]", ManifestError)
        asked = provider.parse_request(fields, name="model", provider="modelx", ttl=None)
        with pytest.raises(ProviderError) as refused:
            provider.mint(asked, replace(context(), session_expires_at=ahead + timedelta(hours=1)))
        assert "refused the broker's token for its time" in refused.value.message
        assert "synchronise this host's clock" in refused.value.message
    finally:
        broker.close()
