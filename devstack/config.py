"""The broker's side of the local stack: its providers pointed at the servers, a policy and a task, as config text.

``STACK_POLICY`` grants the realistic set an operator would (GitHub, AWS and
Vault for agents working on widgets); ``STACK_TASK`` asks for one credential
of each provider. ``provider_tables`` is the ``[providers.*]`` part of the
broker config for the stack; ``config_text`` renders a whole ``broker.toml``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from devstack.aws import REGION, ROLE_ARN
from devstack.github import APP_ID
from devstack.openbao import TOKEN_ROLE

STACK_POLICY = f"""
rules:
  - id: agents-widgets
    description: coding agents working on widgets
    tasks: ["fix-*", "review-*"]
    sandbox_uids: ["0-65534"]
    sandbox_gids: ["0-65534"]
    max_ttl: 1h
    network: ["api.github.com:443", "github.com:443", "*.pythonhosted.org:443", "pypi.org:443", "127.0.0.1:8080"]
    grants:
      - provider: github
        repositories: ["octo-org/widgets", "octo-org/docs-*"]
        permissions: {{contents: write, pull_requests: write, metadata: read}}
      - provider: aws
        roles: ["{ROLE_ARN.rsplit("/", 1)[0]}/agent-*"]
        actions: ["s3:GetObject", "s3:ListBucket"]
        resources: ["arn:aws:s3:::ci-artifacts", "arn:aws:s3:::ci-artifacts/*"]
        require_session_policy: true
        max_ttl: 15m
      - provider: vault
        policies: ["ci-*"]
        max_ttl: 30m
        max_uses: 100
        database_roles: ["agent-*"]
        pki_roles: ["agent"]
        common_names: ["*.ci.internal"]
        ssh_roles: ["agent"]
        principals: ["git"]
"""

STACK_TASK = f"""
version: 1
task: fix-build-123
ttl: 30m
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
credentials:
  - name: repo
    provider: github
    repositories: [octo-org/widgets]
    permissions: {{contents: write, pull_requests: write}}
  - name: artifacts
    provider: aws
    role_arn: {ROLE_ARN}
    ttl: 15m
    session_policy:
      Version: "2012-10-17"
      Statement:
        - {{Effect: Allow, Action: ["s3:GetObject"], Resource: ["arn:aws:s3:::ci-artifacts/*"]}}
  - name: kv
    provider: vault
    policies: [ci-read]
    ttl: 10m
    num_uses: 20
"""


def provider_tables(
    *, vault_addr: str, vault_token_file: Path, aws_url: str, github_url: str, github_key_file: Path
) -> dict[str, dict[str, str]]:
    """``[providers.vault]``, ``[providers.aws]`` and ``[providers.github]`` for the stack's servers."""
    return {
        "vault": {"type": "vault", "addr": vault_addr, "token_file": str(vault_token_file), "token_role": TOKEN_ROLE},
        "aws": {"type": "aws_sts", "region": REGION, "endpoint_url": aws_url},
        "github": {
            "type": "github_app",
            "app_id": str(APP_ID),
            "private_key_file": str(github_key_file),
            "api_url": github_url,
        },
    }


def config_text(settings: Mapping[str, str], providers: Mapping[str, Mapping[str, str]]) -> str:
    """A ``broker.toml``: the top-level ``settings``, then one ``[providers.NAME]`` table each (strings only)."""
    lines = [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
    for name, table in providers.items():
        lines += ["", f"[providers.{name}]", *(f"{key} = {json.dumps(value)}" for key, value in table.items())]
    return "\n".join(lines) + "\n"
