"""docs/reference.md is generated from broker/cli/manual/, which lists exactly the keys the loaders read."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.cli.manual import CONFIG, MANIFEST, POLICY, render
from broker.core.inputs.config import Config, parse_config
from broker.core.inputs.manifest import parse_manifest
from broker.core.inputs.policy import load_policy
from broker.vocab import fields as fields_module
from broker.vocab.manual import Section
from tests.fixtures.stack import STACK_TASK

ROOT = Path(__file__).resolve().parents[3]
CONFIG_TABLE: dict[str, Any] = {
    "policy_dir": str(ROOT / "policies"),
    "providers": {
        "vault": {"type": "vault", "addr": "http://127.0.0.1:8200", "token_file": "t"},
        "aws": {"type": "aws_sts", "region": "us-east-1"},
        "github": {"type": "github_app", "app_id": "1", "private_key_file": "k.pem"},
        "oauth": {
            "type": "oauth",
            "token_url": "https://auth.example.com/token",
            "client_id": "broker",
            "refresh_token_file": "rt",
            "proxy_hosts": ["mcp.example.com:443"],
        },
        "identity": {"type": "identity", "proxy_hosts": ["api.example.com:443"], "upstream_ca_file": "ca.pem"},
        "modelx": {
            "type": "token_exchange",
            "token_endpoint": "https://auth.model.example/oauth/token",
            "audience": "https://api.model.example",
            "proxy_hosts": ["api.model.example:443"],
        },
    },
    "identity": {"issuer": "https://broker.example.com", "signing_key_file": "identity.key", "algorithm": "ES256"},
    "audit": {"witness": "s3://audit-witness/broker", "min_free": "1GiB"},
    "daemon": {"socket": "/run/broker/broker.sock", "socket_group": "broker", "sweep_interval": "60s"},
    "egress": {
        "upstream_ca_file": "/etc/ssl/certs/ca-certificates.crt",
        "evidence_budget": {"records": 10000, "bytes": "64MiB", "cap": 10},
    },
    "telemetry": {"otlp_endpoint": "http://127.0.0.1:4318", "service_name": "broker", "timeout": "1s"},
    "gateway": {
        "listen": "0.0.0.0:3128",
        "advertise": "gateway.example:3128",
        "cert_file": "gateway.pem",
        "key_file": "gateway.key",
        "ca_file": "gateway-ca.pem",
        "max_connections": 4096,
    },
    "sandbox": {
        "podman": {"runtime": "runc", "ulimits": ["nofile=4096:4096"], "extra_args": ["--log-driver=k8s-file"]},
        "docker": {"runtime": "runc"},
    },
}


@pytest.fixture
def read_keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, set[str]]]:
    """Every (path, key) the real loaders look up, with list indexes folded to []."""
    seen: dict[str, set[str]] = {}
    original_get, original_raw = fields_module.Fields._get, fields_module.Fields.raw

    def record(self: fields_module.Fields, key: str) -> None:
        path = re.sub(r"\[\d+\]", "[]", self._path)
        if path.endswith(".tools.arguments"):  # tool name -> argument globs: documented as the arguments key
            return
        if path.endswith(("operations.http", "operations.mcp")):  # an http or mcp entry's key is its HOST:PORT
            key = "HOST:PORT"
        path = re.sub(r"operations\.http\..+", "operations.http.HOST:PORT", path)
        path = re.sub(r"operations\.mcp\..+?:[0-9]+(?=\.|$)", "operations.mcp.HOST:PORT", path)
        seen.setdefault(path, set()).add(key)

    def _get(self: fields_module.Fields, key: str, required: bool) -> Any:
        record(self, key)
        return original_get(self, key, required)

    def raw(self: fields_module.Fields, key: str, default: Any = None) -> Any:
        record(self, key)
        return original_raw(self, key, default)

    monkeypatch.setattr(fields_module.Fields, "_get", _get)
    monkeypatch.setattr(fields_module.Fields, "raw", raw)
    yield seen


def documented(sections: tuple[Section, ...]) -> dict[str, set[str]]:
    return {section.path: {key.name for key in section.keys} for section in sections}


def config(tmp_path: Path) -> Config:
    return parse_config(CONFIG_TABLE, tmp_path / "broker.toml")


def test_config_reference_lists_exactly_what_the_loader_reads(read_keys: dict[str, set[str]], tmp_path: Path) -> None:
    config(tmp_path)
    read_keys.pop("providers", None)  # the instance names themselves
    types = {name: table["type"] for name, table in CONFIG_TABLE["providers"].items()}
    by_type = {  # a provider type's table is documented once, whatever the instance is called
        f"providers.{types[path.split('.')[1]]}" if path.startswith("providers.") else path: keys
        for path, keys in read_keys.items()
    }
    assert by_type == documented(CONFIG)


DYNAMIC_TASK = """
version: 1
task: fix-db-1
credentials:
  - {name: db, provider: vault, kind: database, role: agent-ro}
  - {name: cert, provider: vault, kind: pki, role: agent, common_name: a.ci.internal, alt_names: [b.ci.internal]}
  - {name: host, provider: vault, kind: ssh, role: agent, principals: [git]}
"""
SECRET_TASK = """
version: 1
task: fix-llm-1
network: {allow: ['api.openai.com:443']}
credentials:
  - {name: llm, provider: vault, kind: secret, path: llm/openai, field: api_key, inject: proxy,
     hosts: ['api.openai.com:443'], header: 'Authorization: Bearer {}', env: OPENAI_API_KEY}
"""

OAUTH_TASK = """
version: 1
task: fix-mcp-1
network: {allow: ['mcp.example.com:443']}
credentials:
  - {name: mcp, provider: oauth, inject: proxy, scopes: ['issues:read'], hosts: ['mcp.example.com:443']}
"""
OAUTH_POLICY = """
rules:
  - id: mcp
    tasks: ["fix-mcp-*"]
    network: ["mcp.example.com:443"]
    grants:
      - {provider: oauth, scopes: ["issues:read", "pulls:write"]}
"""


IDENTITY_TASK = """
version: 1
task: fix-api-1
network: {allow: ['api.model.example:443']}
credentials:
  - {name: api, provider: identity, audience: 'https://api.example.com'}
  - {name: model, provider: modelx, inject: proxy, scopes: [inference]}
"""


OPERATIONS = """operations:
  git: {hosts: ['github.com:443'], push: ['refs/heads/agent/x'], delete: false}
  github_api: {hosts: ['github.com:443'], allow: ['GET *'], deny: [], reviews: {approve: false}, graphql_mutations: []}
  http: {'pypi.org:443': {methods: [GET], paths: ['/x']}}
  mcp: {'api.githubcopilot.com:443': {tools: {allow: [get_*], deny: [], arguments: {get_issue: {owner: o}}},
        resources: ['repo://o/*'], prompts: {allow: [], deny: []}}}"""


def test_manifest_reference_lists_exactly_what_the_loader_reads(read_keys: dict[str, set[str]], tmp_path: Path) -> None:
    loaded = config(tmp_path)
    read_keys.clear()
    text = STACK_TASK.replace(  # every key of the manifest, operations included
        "sandbox: {",
        f"network: {{allow: ['github.com:443', 'pypi.org:443', 'api.githubcopilot.com:443']}}\n{OPERATIONS}\nsandbox: {{env: {{CI: 'true'}}, limits: {{memory: 1GiB, cpus: 2, pids: 512}}, ",
    )
    parse_manifest(text.encode(), loaded)
    parse_manifest(DYNAMIC_TASK.encode(), loaded)
    parse_manifest(SECRET_TASK.encode(), loaded)
    parse_manifest(OAUTH_TASK.encode(), loaded)
    parse_manifest(IDENTITY_TASK.encode(), loaded)
    expected = documented(MANIFEST)
    assert read_keys == expected


def test_policy_reference_lists_exactly_what_the_loader_reads(read_keys: dict[str, set[str]], tmp_path: Path) -> None:
    loaded = config(tmp_path)
    read_keys.clear()
    load_policy(ROOT / "policies", loaded)
    (tmp_path / "oauth-policies").mkdir()
    (tmp_path / "oauth-policies" / "mcp.yaml").write_text(OAUTH_POLICY)
    load_policy(tmp_path / "oauth-policies", loaded)  # the example policy names no oauth instance
    assert read_keys == documented(POLICY)


def test_the_committed_reference_is_current() -> None:
    committed = (ROOT / "docs" / "reference.md").read_text()
    assert committed == render(), "docs/reference.md is stale: run scripts/gen-docs"
