"""Manifest ``network.allow`` against policy ``network``: parsing, coverage, denial logged, ``policy check`` explains.

The hostile spellings (ports out of range, ``*`` alone, IDN and case tricks,
trailing dots, user info, paths) are files of ``tests/hostile``; this file
checks the matching rules and the denial path through the real CLI.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.egress.allowlist.lists import decide_network
from broker.egress.destinations import DestinationError, canonical_host, parse_destination
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.security.inputs.test_corpus import corpus_providers

TASK = """
version: 1
task: fix-build-123
ttl: 30m
sandbox: {{uid: 1000, gid: 1000}}
network:
  allow: {allow}
credentials:
  - name: kv
    provider: vault
    policies: [ci-read]
    ttl: 10m
    num_uses: 5
"""

POLICY = """
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["github.com:443", "*.pythonhosted.org:443", "127.0.0.1:8080", "[::1]:8080"]
    grants:
      - provider: vault
        policies: ["ci-*"]
        max_uses: 100
  - id: other-task
    tasks: ["review-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["evil.example.com:443"]
    grants:
      - provider: vault
        policies: ["ci-*"]
"""


def covered(rule: list[str], request: list[str]) -> bool:
    entries = tuple(parse_destination(e) for e in rule)
    return decide_network(tuple(parse_destination(r) for r in request), [("r", entries)]).allowed


@pytest.mark.parametrize(
    ("request_", "allowed"),
    [
        (["github.com:443"], True),
        (["github.com:80"], False),
        (["api.github.com:443"], False),  # an exact name does not cover its sub-domains
        (["files.pythonhosted.org:443"], True),
        (["a.b.pythonhosted.org:443"], True),
        (["pythonhosted.org:443"], False),  # a wildcard never covers its own suffix
        (["evilpythonhosted.org:443"], False),  # nor a name that merely ends in the same letters
        (["*.pythonhosted.org:443"], True),
        (["*.org:443".replace("*.org", "*.hosted.org")], False),
        (["127.0.0.1:8080"], True),
        (["127.0.0.2:8080"], False),
        (["[::1]:8080"], True),
        (["github.com:443", "pypi.org:443"], False),  # every destination must be covered
    ],
)
def test_a_rule_covers_only_what_it_names(request_: list[str], allowed: bool) -> None:
    rule = ["github.com:443", "*.pythonhosted.org:443", "127.0.0.1:8080", "[::1]:8080"]
    assert covered(rule, request_) is allowed


def test_a_broader_wildcard_in_the_rule_covers_a_narrower_one_in_the_manifest() -> None:
    assert covered(["*.github.com:443"], ["*.api.github.com:443"])
    assert not covered(["*.api.github.com:443"], ["*.github.com:443"])


@pytest.mark.parametrize("text", ["GITHUB.COM:443", "github.com.:443", "g\u0456thub.com:443", "*:443", "[::1%lo]:1"])
def test_every_other_spelling_is_refused(text: str) -> None:
    with pytest.raises(DestinationError):
        parse_destination(text)


def test_requested_hosts_compare_in_one_spelling() -> None:
    """The proxy folds what a client sends (case, one trailing dot, brackets) before matching."""
    assert canonical_host("GitHub.COM.") == "github.com"
    assert canonical_host("[::1]") == "::1"
    assert canonical_host("github.com..") == "github.com.."  # never matches a parsed name


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


def test_a_destination_outside_the_rule_is_denied_and_logged(env: BrokerEnv) -> None:
    task = env.write_task(TASK.format(allow='["github.com:443", "evil.example.com:443"]'))
    result = env.run("issue", "--task", str(task))
    assert result.code == 3
    assert "network: rule agents: evil.example.com:443 is not in its network" in result.stderr
    denied = [r for r in env.log_records() if r["event"] == "session.denied"]
    assert len(denied) == 1
    assert denied[0]["reasons"] == ["network: rule agents: evil.example.com:443 is not in its network"]
    assert env.session_dirs() == []
    assert "credential.issued" not in env.events()


def test_a_rule_of_another_task_does_not_lend_its_network(env: BrokerEnv) -> None:
    """``evil.example.com`` is in the network of a rule for review-* tasks; this is a fix-* task."""
    task = env.write_task(TASK.format(allow='["evil.example.com:443"]'))
    assert env.run("issue", "--task", str(task)).code == 3


def test_policy_check_explains_the_network_decision(env: BrokerEnv) -> None:
    allowed = env.write_task(TASK.format(allow='["github.com:443", "files.pythonhosted.org:443"]'), "ok.yaml")
    result = env.run("policy", "check", "--task", str(allowed))
    assert result.code == 0, result.stderr
    assert "network (github.com:443, files.pythonhosted.org:443): allowed by rule agents" in result.stdout
    denied = env.write_task(TASK.format(allow='["github.com:22"]'), "denied.yaml")
    result = env.run("policy", "check", "--task", str(denied))
    assert result.code == 3
    assert "network (github.com:22): denied" in result.stdout
    assert "- rule agents: github.com:22 is not in its network" in result.stdout
    as_json = env.run("policy", "check", "--json", "--task", str(denied))
    assert as_json.json()["network"] == {
        "allow": ["github.com:22"],
        "allowed": False,
        "rule": None,
        "reasons": ["rule agents: github.com:22 is not in its network"],
    }


def test_a_rule_without_network_allows_none(env: BrokerEnv) -> None:
    first_network = '    network: ["github.com:443", "*.pythonhosted.org:443", "127.0.0.1:8080", "[::1]:8080"]\n'
    env.write_policy(POLICY.replace(first_network, ""))
    task = env.write_task(TASK.format(allow='["github.com:443"]'))
    result = env.run("policy", "check", "--task", str(task))
    assert result.code == 3
    assert "rule agents: allows no network destinations" in result.stdout


@pytest.mark.parametrize(
    ("entry", "message"),
    [("*:443", "a wildcard is '*.'"), ("GitHub.com:443", "lower case"), ("github.com:99999", "the port must be")],
)
def test_policy_lint_refuses_a_bad_network_entry(env: BrokerEnv, entry: str, message: str) -> None:
    env.write_policy(POLICY.replace('"github.com:443", "*.pythonhosted', f'"{entry}", "*.pythonhosted'))
    result = env.run("policy", "lint")
    assert result.code == 2
    assert "rules[0].network[0]:" in result.stderr and message in result.stderr
