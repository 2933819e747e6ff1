"""A ``kind: secret`` (a KV v2 field only the proxy holds) is never handed to a child session.

A child's credentials are files in its parent's directory; a ``kind: secret``
goes only by the proxy. Whatever a sub-agent asks for (the same secret by
the proxy, the same secret as a file, a token under the secret's name), the
parent's key stays in the parent's proxy: the manifest refuses a file, the
coverage refuses proxy injection and the parent's proxied credential, and the
Vault provider's narrowing covers no ``kind: secret`` at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from broker.core.delegation.coverage import cover
from broker.core.inputs.config import Config, parse_config
from broker.vocab.errors import ManifestError
from providers.vault.narrowing import vault_narrower
from providers.vault.request import VaultRequest
from providers.vault.secret import SecretRequest
from tests.security.delegation.test_widening import NOW, _keys, _manifest, _parent

HOST = "api.openai.com:443"
SECRET: dict[str, Any] = {
    "name": "openai",
    "provider": "vault",
    "kind": "secret",
    "path": "llm/openai",
    "field": "api_key",
    "inject": "proxy",
    "hosts": [HOST],
    "header": "Authorization: Bearer {}",
}
NETWORK = {"allow": [HOST]}


@pytest.fixture
def config(tmp_path: Path) -> Config:
    table = {"providers": {"vault": {"type": "vault", "addr": "http://127.0.0.1:8200", "token_file": "t"}}}
    return parse_config(table, tmp_path / "broker.toml")


def test_a_childs_kind_secret_is_refused_by_the_proxy_or_as_a_file(config: Config) -> None:
    record, parent, held = _parent(config, credentials=[SECRET], network=NETWORK)
    by_proxy = _manifest(config, [SECRET], ttl="5m", network=NETWORK)
    reasons, decision = cover(config, record, parent, held, by_proxy, NOW)
    assert decision is None and _keys(reasons) == ["credentials[0].inject"], reasons
    as_file = {k: v for k, v in SECRET.items() if k != "inject"}
    with pytest.raises(ManifestError, match=r"credentials\[0\]\.inject: a vault secret goes only by the proxy"):
        _manifest(config, [as_file], ttl="5m", network=NETWORK)
    token = {"name": "openai", "provider": "vault", "policies": ["ci-read"]}
    reasons, decision = cover(config, record, parent, held, _manifest(config, [token], ttl="5m"), NOW)
    assert decision is None, reasons
    assert any("never enters the sandbox" in reason for reason in reasons), reasons


def test_the_vault_narrowing_covers_no_kind_secret(config: Config) -> None:
    """Were a secret ever to reach the narrowing (as a file), the provider itself refuses to cover it."""
    _, parent, _ = _parent(config, credentials=[SECRET], network=NETWORK)
    [request] = parent.credentials
    assert isinstance(request, SecretRequest)
    reasons = vault_narrower(request, request)
    assert reasons and reasons[0].startswith("kind: secret"), reasons
    token = _manifest(config, [{"name": "kv", "provider": "vault", "policies": ["ci-read"]}]).credentials[0]
    assert isinstance(token, VaultRequest)
    assert vault_narrower(token, request)[0].startswith("kind: secret")
    assert json.dumps(reasons).count("api_key") == 0  # the reason names the kind, never a field or value
