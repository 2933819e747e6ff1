"""The policy a running exec decides with: parsed again only when its files change or it is old, and a broken one
fails every decision (fail closed) without being parsed at each."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.core.inputs.policy_source import PolicySource
from broker.vocab.errors import PolicyFileError
from tests.unit.core.inputs.test_policy import POLICY, make_config, write


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def source(tmp_path: Path, clock: Clock) -> PolicySource:
    config = make_config(tmp_path)
    return PolicySource(config.policy_dir, config, refresh=60, clock=clock)


def grants(policies: str) -> str:
    return POLICY.replace('policies: ["ci-read", "team-*"]', f"policies: {policies}")


def test_the_files_are_parsed_again_only_when_they_change(tmp_path: Path) -> None:
    clock = Clock()
    write(tmp_path, POLICY)
    policies = source(tmp_path, clock)
    first = policies.current()
    assert policies.current() is first and policies.loads == 1  # unchanged: a stat, nothing parsed
    write(tmp_path, grants('["ci-read"]'))  # in place, another size
    changed = policies.current()
    assert policies.loads == 2 and changed.rules[0].grants != first.rules[0].grants
    write(tmp_path, POLICY, name="q.yaml")  # a file more (its rule id clashes: the policy no longer loads)
    with pytest.raises(PolicyFileError, match="also defined in p.yaml"):
        policies.current()
    (tmp_path / "policies" / "q.yaml").unlink()
    assert policies.current().rules == changed.rules and policies.loads == 4


def test_a_policy_is_read_again_once_it_is_refresh_seconds_old_whatever_the_files_say(tmp_path: Path) -> None:
    clock = Clock()
    write(tmp_path, POLICY)
    policies = source(tmp_path, clock)
    policies.current()
    clock.now += 59
    policies.current()
    assert policies.loads == 1
    clock.now += 1  # a change the file clock may hide is seen by now
    policies.current()
    assert policies.loads == 2


def test_a_broken_policy_fails_each_decision_until_it_is_fixed_without_being_parsed_each_time(tmp_path: Path) -> None:
    clock = Clock()
    write(tmp_path, POLICY)
    policies = source(tmp_path, clock)
    policies.current()
    write(tmp_path, "rules: [")
    for _ in range(3):
        with pytest.raises(PolicyFileError):
            policies.current()
    assert policies.loads == 2
    write(tmp_path, POLICY)
    assert policies.current().rules[0].id == "agents" and policies.loads == 3


def test_a_missing_policy_directory_fails_closed(tmp_path: Path) -> None:
    policies = source(tmp_path, Clock())
    with pytest.raises(PolicyFileError, match="does not exist"):
        policies.current()
