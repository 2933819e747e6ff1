"""The ``github_app`` provider's configuration, without a server: the config table and its refusals, what loading
it costs, the git host an API URL means, and a revocation with no token kept to revoke.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from broker.vocab.errors import ConfigError, ProviderError
from providers.base import RevokeTarget
from providers.github.git import GitHost, git_host
from providers.github.provider import GitHubAppProvider
from providers.registry import provider_class
from tests.fixtures.github_app import build


def test_config() -> None:
    assert provider_class("github_app") is GitHubAppProvider
    provider = build({"app_id": 123456})
    assert provider.app_id == "123456" and provider.api_url == "https://api.github.com"
    assert provider.api.key_file == Path("/etc/broker/app.pem")
    assert build({"app_id": "123456", "api_url": "https://ghe.example.com/api/v3/"}).api_url == (
        "https://ghe.example.com/api/v3"
    )
    assert provider.max_ttl == 3600 and provider.min_ttl == 1
    assert (provider.name, provider.type_name) == ("github", "github_app")


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({}, "app_id"),
        ({"app_id": "abc"}, "app_id"),
        ({"app_id": True}, "app_id"),
        ({"app_id": 0}, "app_id"),
        ({"app_id": 1.5}, "app_id"),
        ({"app_id": 1, "api_url": "http://api.example.com"}, "api_url"),
        ({"app_id": 1, "api_url": "https://user:pw@api.example.com"}, "api_url"),
        ({"app_id": 1, "api_url": "https://api.example.com/?x=1"}, "api_url"),
        ({"app_id": 1, "api_url": "ftp://api.example.com"}, "api_url"),
        ({"app_id": 1, "timeout": 0}, "timeout"),
    ],
)
def test_config_refuses(table: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^providers\.github\.{field}:"):
        build(table)


def test_config_loading_stays_cheap() -> None:
    """Building the provider neither imports requests/jwt/cryptography nor touches the key or network."""
    code = (
        "import sys, pathlib\n"
        "from broker.vocab.errors import ConfigError\nfrom broker.vocab.fields import Fields\n"
        "from providers.registry import provider_class\n"
        "cls = provider_class('github_app')\n"
        "f = Fields({'app_id': '1', 'private_key_file': '/nonexistent.pem'}, 'p', ConfigError)\n"
        "cls.from_config('github', f, pathlib.Path('/'))\n"
        "print(sorted(m for m in ('requests', 'jwt', 'cryptography') if m in sys.modules))\n"
    )
    root = Path(__file__).resolve().parents[4]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("api_url", "host"),
    [
        ("https://api.github.com", GitHost("https", "github.com")),
        ("https://ghe.example.com/api/v3", GitHost("https", "ghe.example.com")),
        ("https://ghe.example.com:8443/api/v3", GitHost("https", "ghe.example.com:8443")),
        ("https://api.octo.ghe.com", GitHost("https", "octo.ghe.com")),
        ("http://127.0.0.1:8765", GitHost("http", "127.0.0.1:8765")),
    ],
)
def test_git_host(api_url: str, host: GitHost) -> None:
    assert git_host(api_url) == host


def test_revoke_without_the_token_is_not_retryable() -> None:
    provider = build({"app_id": 1})
    lost = RevokeTarget(name="repo", reference={"installation_id": "1", "owner": "o"}, expires_at=None)
    with pytest.raises(ProviderError, match="no token kept for repo") as caught:
        provider.revoke(lost, datetime.now(UTC))
    assert not caught.value.retryable
