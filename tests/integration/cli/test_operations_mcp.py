"""``operations.mcp`` through the real CLI: policy lint, policy check (text and JSON), a widening manifest's denial.

The reading and the narrowing themselves are ``tests/unit/egress/operations/test_mcp.py``; here the same
documents go through the loaders the commands use: a bad key is one line naming it (exit 2), a manifest that
widens the rule is denied naming each key (exit 3, logged), and ``policy check`` shows the effective entry.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.security.inputs.test_corpus import corpus_providers

HOST = "api.githubcopilot.com:443"
POLICY = f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["{HOST}"]
    operations:
      mcp:
        "{HOST}":
          tools:
            allow: ["get_*", "list_*", "search_*", "create_pull_request"]
            deny: ["merge_*"]
            arguments: {{create_pull_request: {{owner: octo-org, base: "agent/*"}}}}
          resources: ["repo://octo-org/*"]
          prompts: false
    grants:
      - provider: vault
        policies: ["ci-*"]
        max_uses: 100
"""
TASK = f"""
version: 1
task: fix-build-123
ttl: 30m
sandbox: {{uid: 1000, gid: 1000}}
network: {{allow: ["{HOST}"]}}
OPERATIONS
credentials:
  - {{name: kv, provider: vault, policies: [ci-read], ttl: 10m, num_uses: 5}}
"""


@pytest.fixture
def env(tmp_path: Path) -> Iterator[BrokerEnv]:
    broker = make_env(tmp_path)
    for name, table in corpus_providers(broker.root).items():
        broker.add_provider(name, table)
    broker.write_policy(POLICY)
    try:
        yield broker
    finally:
        broker.cleanup()


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('deny: ["merge_*"]', 'deny: ["merge pr"]', f"rules[0].operations.mcp.{HOST}.tools.deny[0]: 'merge pr'"),
        ('base: "agent/*"', 'base: "agent/../*"', f"rules[0].operations.mcp.{HOST}.tools.arguments"),
        ("prompts: false", "prompts: sometimes", f"rules[0].operations.mcp.{HOST}.prompts: expected true"),
        (f'network: ["{HOST}"]', 'network: ["github.com:443"]', f"operations.mcp.{HOST}: {HOST} has no matching"),
    ],
)
def test_policy_lint_refuses_a_malformed_mcp_entry_with_one_line_naming_the_key(
    env: BrokerEnv, old: str, new: str, key: str
) -> None:
    env.write_policy(POLICY.replace(old, new))
    result = env.run("policy", "lint")
    assert result.code == 2
    assert result.stderr.count("\n") == 1 and key in result.stderr, result.stderr


def test_policy_check_shows_the_effective_entry_narrowed_by_the_manifest(env: BrokerEnv) -> None:
    narrowing = f'operations:\n  mcp: {{"{HOST}": {{tools: {{allow: [get_issue], deny: [get_secret]}}}}}}'
    task = env.write_task(TASK.replace("OPERATIONS", narrowing))
    text = env.run("policy", "check", "--task", str(task))
    assert text.code == 0, text.stderr
    lines = text.stdout.splitlines()
    start = lines.index("  operations (rule agents, enforced by the session's proxy):")
    assert lines[start + 1 :] == [
        f"    mcp on {HOST}:",
        "      tools allow get_issue; deny get_secret, merge_*",
        "      arguments create_pull_request(owner=octo-org, base=agent/*)",
        "      resources none; prompts allow none",
    ]
    entry = json.loads(env.run("policy", "check", "--task", str(task), "--json").stdout)["operations"]["mcp"][0]
    assert entry["tools"]["deny"] == ["get_secret", "merge_*"]


def test_a_widening_manifest_is_denied_naming_each_key_and_the_denial_is_logged(env: BrokerEnv) -> None:
    widening = f'operations:\n  mcp: {{"{HOST}": {{tools: {{allow: ["*"]}}, resources: ["repo://*"], prompts: true}}}}'
    task = env.write_task(TASK.replace("OPERATIONS", widening))
    result = env.run("issue", "--task", str(task))
    assert result.code == 3
    prefix = f"rule agents: operations.mcp.{HOST}"
    assert f"{prefix}.tools.allow[0]: * is not within the rule's allow" in result.stderr
    [denied] = [r for r in env.log_records() if r["event"] == "session.denied"]
    assert [reason.partition(": ")[2].partition(": ")[0] for reason in denied["reasons"]] == [
        f"operations.mcp.{HOST}.tools.allow[0]",
        f"operations.mcp.{HOST}.prompts.allow[0]",
        f"operations.mcp.{HOST}.resources[0]",
    ]
    assert "credential.issued" not in env.events()
