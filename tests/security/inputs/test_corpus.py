"""The hostile-manifest corpus (``tests/hostile/``) through the real CLI: refused in one clear line, nothing minted.

Every file is run as ``broker issue --task FILE`` against a broker with the
three provider types (``vault``, ``aws``, ``github``) pointed at a closed port
and the realistic grant of ``tests/fixtures/stack.py``. ``expected.json``
holds each file's exit code (2 invalid, 3 valid but denied) and a fragment of
the one-line error, which names the offending field (or, for a denial, the
credential and what fell outside the grant).

GitHub compares owner and repository names case-insensitively; so does the
broker (``providers/github/request.py``): ``Octo-Org/Widgets`` is covered by a
grant of ``octo-org/widgets`` (see the test below), while a confusable such as
a Cyrillic letter is not even a valid name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.core.inputs.config import Config, parse_config
from broker.core.inputs.manifest import parse_manifest
from broker.vocab.errors import ManifestError
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.net import closed_port
from tests.fixtures.stack import STACK_POLICY, STACK_TASK

CORPUS = Path(__file__).parents[2] / "hostile"
EXPECTED: dict[str, dict[str, Any]] = json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))
FILES = sorted(p.name for p in CORPUS.iterdir() if p.suffix in (".yaml", ".json") and p.name != "expected.json")


def corpus_providers(root: Path) -> dict[str, dict[str, object]]:
    """vault, aws and github, all pointed at a closed loopback port (nothing can be minted)."""
    dead = f"http://127.0.0.1:{closed_port()}"
    return {
        "vault": {"type": "vault", "addr": dead, "token_file": str(root / "vault-token")},
        "aws": {"type": "aws_sts", "region": "us-east-1", "endpoint_url": dead},
        "github": {
            "type": "github_app",
            "app_id": "424242",
            "private_key_file": str(root / "missing-github-app.pem"),
            "api_url": dead,
        },
    }


@pytest.fixture(scope="module")
def corpus_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerEnv]:
    env = make_env(tmp_path_factory.mktemp("corpus"))
    for name, table in corpus_providers(env.root).items():
        env.add_provider(name, table)
    env.write_policy(STACK_POLICY)
    try:
        yield env
    finally:
        env.cleanup()


def test_the_corpus_is_large_and_every_file_has_an_expectation() -> None:
    assert len(FILES) >= 60
    assert sorted(EXPECTED) == FILES
    for name, expected in EXPECTED.items():
        assert expected["exit"] in (2, 3), name
        assert isinstance(expected["message"], str) and expected["message"], name
    assert {e["exit"] for e in EXPECTED.values()} == {2, 3}


@pytest.mark.parametrize("name", FILES)
def test_a_hostile_manifest_is_refused_in_one_line_and_mints_nothing(corpus_env: BrokerEnv, name: str) -> None:
    expected = EXPECTED[name]
    before = len(corpus_env.log_records())
    result = corpus_env.run("issue", "--task", str(CORPUS / name))
    assert result.code == expected["exit"], result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("broker: error: ")
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("\n")
    assert expected["message"] in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr) < 1000
    assert result.stderr.rstrip("\n").isprintable(), "control or format characters reached stderr"
    assert corpus_env.session_dirs() == []
    new_events = [r["event"] for r in corpus_env.log_records()[before:]]
    assert "credential.issued" not in new_events
    if expected["exit"] == 2:
        assert new_events == []  # an invalid manifest never reaches the policy, so nothing is logged
    else:
        assert new_events[0] == "session.denied"


def test_the_corpus_manifest_is_allowed_so_every_denial_comes_from_its_one_change(corpus_env: BrokerEnv) -> None:
    """The corpus is STACK_TASK with one change each; STACK_TASK itself passes the policy."""
    task = corpus_env.write_task(STACK_TASK, "allowed.yaml")
    result = corpus_env.run("policy", "check", "--task", str(task))
    assert result.code == 0, result.stderr


@pytest.mark.parametrize("repositories", ["Octo-Org/Widgets", "OCTO-ORG/WIDGETS", "octo-org/Docs-Site"])
def test_github_names_compare_case_insensitively_as_github_does(corpus_env: BrokerEnv, repositories: str) -> None:
    task = STACK_TASK.replace("[octo-org/widgets]", f"[{repositories}]")
    result = corpus_env.run("policy", "check", "--task", str(corpus_env.write_task(task, "case.yaml")))
    assert result.code == 0, result.stderr


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    root = tmp_path_factory.mktemp("config")
    return parse_config({"providers": corpus_providers(root)}, root / "broker.toml")


@pytest.mark.parametrize("policy", ["ROOT", "Root"])
def test_the_root_policy_is_refused_in_any_case(config: Config, policy: str) -> None:
    text = STACK_TASK.replace("policies: [ci-read]", f"policies: [{policy}]")
    with pytest.raises(ManifestError, match="root policy is never issued"):
        parse_manifest(text.encode(), config)


@pytest.mark.parametrize("key", ["NotAction", "NotResource"])
def test_not_action_and_not_resource_are_denied_and_logged(corpus_env: BrokerEnv, key: str) -> None:
    """Auditors see the attempt: a ``session.denied`` record names the refused key; ``policy check`` explains it."""
    task = str(CORPUS / f"sp-{key.lower().replace('not', 'not-')}.yaml")
    before = len(corpus_env.log_records())
    assert corpus_env.run("issue", "--task", task).code == 3
    denied = [r for r in corpus_env.log_records()[before:] if r["event"] == "session.denied"]
    assert len(denied) == 1
    assert any(f"Statement[0]: {key} is refused" in reason for reason in denied[0]["reasons"]), denied[0]
    check = corpus_env.run("policy", "check", "--task", task)
    assert check.code == 3
    assert f"session_policy.Statement[0]: {key} is refused" in check.stdout + check.stderr


DYNAMIC = {
    "database": "kind: database\n    role: agent-ro",
    "pki": "kind: pki\n    role: agent\n    common_name: agent.ci.internal\n    alt_names: [build.ci.internal]",
    "ssh": "kind: ssh\n    role: agent\n    principals: [git]",
}


@pytest.mark.parametrize("kind", sorted(DYNAMIC))
def test_the_corpus_dynamic_credentials_are_allowed_so_their_denials_come_from_one_change(
    corpus_env: BrokerEnv, kind: str
) -> None:
    task = STACK_TASK.replace("policies: [ci-read]\n    ttl: 10m\n    num_uses: 20", f"{DYNAMIC[kind]}\n    ttl: 10m")
    assert f"kind: {kind}" in task
    result = corpus_env.run("policy", "check", "--task", str(corpus_env.write_task(task, f"{kind}.yaml")))
    assert result.code == 0, result.stdout + result.stderr
