"""Operations through the real CLI: policy lint, policy check (text and JSON), a widening manifest's denial, config.

The library's reading and narrowing are ``tests/unit/egress/operations/test_policy.py``;
here the same documents go through the loaders the commands use, so a key
the parser reads reaches the user as one line naming it, with the exit code
of its kind, and a denial is logged as every denial is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.core.credential.proxied import session_interception
from broker.core.inputs.config import load_config
from broker.core.inputs.manifest import parse_manifest
from broker.vocab.errors import ConfigError
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.security.inputs.test_corpus import corpus_providers

POLICY = """
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["github.com:443", "api.github.com:443", "pypi.org:443"]
    operations:
      git: {hosts: ["github.com:443"], push: ["refs/heads/agent/*"]}
      github_api:
        hosts: ["api.github.com:443"]
        allow: ["GET *", "POST /repos/*/*/pulls"]
        deny: ["PUT /repos/*/*/pulls/*/merge"]
        graphql_mutations: [addComment]
      http: {"pypi.org:443": {methods: [GET, HEAD]}}
    grants:
      - provider: vault
        policies: ["ci-*"]
        max_uses: 100
"""

TASK = """
version: 1
task: fix-build-123
ttl: 30m
sandbox: {{uid: 1000, gid: 1000}}
network:
  allow: ["github.com:443", "api.github.com:443", "pypi.org:443"]
{operations}
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
        ('push: ["refs/heads/agent/*"]', 'push: ["refs/heads/**"]', "rules[0].operations.git.push[0]:"),
        ('push: ["refs/heads/agent/*"]', 'pushes: ["refs/heads/x"]', "rules[0].operations.git.pushes:"),
        ('"POST /repos/*/*/pulls"]', '"POST repos/*/*/pulls"]', "rules[0].operations.github_api.allow[1]:"),
        ("methods: [GET, HEAD]", "methods: [get]", "rules[0].operations.http.pypi.org:443.methods[0]:"),
        ('hosts: ["github.com:443"]', 'hosts: ["gitlab.com:443"]', "rules[0].operations.git.hosts[0]:"),
    ],
)
def test_policy_lint_refuses_malformed_operations_with_one_line_naming_the_key(
    env: BrokerEnv, old: str, new: str, key: str
) -> None:
    env.write_policy(POLICY.replace(old, new))
    result = env.run("policy", "lint")
    assert result.code == 2
    assert result.stderr.count("\n") == 1 and key in result.stderr, result.stderr


def test_a_host_without_its_network_entry_is_named(env: BrokerEnv) -> None:
    env.write_policy(POLICY.replace('hosts: ["github.com:443"]', 'hosts: ["gitlab.com:443"]'))
    result = env.run("policy", "lint")
    assert result.stderr.strip().endswith(
        "rules[0].operations.git.hosts[0]: gitlab.com:443 has no matching entry in network"
    )


def test_policy_check_shows_the_effective_operations_narrowed_by_the_manifest(env: BrokerEnv) -> None:
    narrowing = 'operations:\n  git: {hosts: ["github.com:443"], push: ["refs/heads/agent/fix-*"]}'
    task = env.write_task(TASK.format(operations=narrowing))
    text = env.run("policy", "check", "--task", str(task))
    assert text.code == 0, text.stderr
    lines = text.stdout.splitlines()
    start = lines.index("  operations (rule agents, enforced by the session's proxy):")
    assert lines[start + 1 :] == [
        "    git on github.com:443: fetch and clone; push refs/heads/agent/fix-*; deletions refused",
        "    github_api on api.github.com:443:",
        "      allow GET *, POST /repos/*/*/pulls",
        "      deny PUT /repos/*/*/pulls/*/merge",
        "      review approvals refused; GraphQL mutations addComment",
        "    http on pypi.org:443: GET, HEAD on *",
    ]
    as_json = env.run("policy", "check", "--task", str(task), "--json")
    operations = json.loads(as_json.stdout)["operations"]
    assert operations["rule"] == "agents" and operations["reasons"] == []
    assert [g["push"] for g in operations["git"]] == [["refs/heads/agent/fix-*"], ["refs/heads/agent/*"]]
    assert operations["github_api"][0]["deny"] == ["PUT /repos/*/*/pulls/*/merge"]


def test_a_widening_manifest_is_denied_naming_each_key_and_the_denial_is_logged(env: BrokerEnv) -> None:
    widening = (
        "operations:\n"
        '  git: {hosts: ["github.com:443"], push: ["refs/heads/*"], delete: true}\n'
        '  github_api: {hosts: ["api.github.com:443"], reviews: {approve: true}}'
    )
    task = env.write_task(TASK.format(operations=widening))
    result = env.run("issue", "--task", str(task))
    assert result.code == 3
    assert "rule agents: operations.git.push[0]: refs/heads/* is not within the rule's push" in result.stderr
    [denied] = [r for r in env.log_records() if r["event"] == "session.denied"]
    assert denied["reasons"] == [
        "rule agents: operations.git.push[0]: refs/heads/* is not within the rule's push (refs/heads/agent/*)",
        "rule agents: operations.git.delete: true where the rule's is false",
        "rule agents: operations.github_api.reviews.approve: true where the rule's is false",
    ]
    assert "credential.issued" not in env.events()
    check = env.run("policy", "check", "--task", str(task))
    assert check.code == 3 and "  operations: denied (the manifest widens the rule's)" in check.stdout


def test_a_manifest_s_operations_need_its_network_allow(env: BrokerEnv) -> None:
    outside = 'operations:\n  http: {"files.pythonhosted.org:443": {methods: [GET]}}'
    task = env.write_task(TASK.format(operations=outside))
    result = env.run("issue", "--task", str(task))
    assert result.code == 2
    assert result.stderr.strip().endswith(
        "operations.http.files.pythonhosted.org:443: files.pythonhosted.org:443 has no matching entry in network.allow"
    )


def test_the_egress_upstream_ca_file_is_read_strictly_and_loaded_at_issue(env: BrokerEnv, tmp_path: Path) -> None:
    env.tables["egress"] = {"upstream_ca": "/etc/ssl/certs/ca-certificates.crt"}
    env.write_config()
    assert "egress.upstream_ca" in env.run("policy", "lint").stderr
    env.tables["egress"] = {"upstream_ca_file": str(tmp_path / "missing.pem")}
    env.write_config()
    config = load_config(env.config_path)
    assert config.egress_upstream_ca_file == tmp_path / "missing.pem"
    manifest = parse_manifest(TASK.format(operations="").encode(), config)
    with pytest.raises(ConfigError, match=r"^egress.upstream_ca_file: cannot be loaded \(FileNotFoundError\)$"):
        session_interception(config, manifest)
