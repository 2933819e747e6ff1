"""``sandbox.limits`` and a rule's ``limits``: read strictly, and the manifest's within the rules' (fail closed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.cli.render import decision_lines
from broker.core.inputs.limits import capped, read_limits
from broker.host.limits import NO_LIMITS, Limits
from broker.vocab.errors import ManifestError
from broker.vocab.fields import Fields
from tests.unit.core.inputs.test_policy import POLICY, decision

pytestmark = pytest.mark.unit


def read(value: object) -> Limits:
    return read_limits(Fields({"limits": value}, "sandbox", ManifestError).mapping("limits"))


def test_the_three_keys_are_read_in_their_units() -> None:
    assert read({"memory": "4GiB", "cpus": 2, "pids": 512}) == Limits(memory=4 << 30, cpus=2000, pids=512)
    assert read({"cpus": 0.5}) == Limits(cpus=500)
    assert read({"cpus": "1.25"}) == Limits(cpus=1250)
    assert read({"memory": 268435456}) == Limits(memory=256 << 20)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({}, "sandbox.limits.memory: limits needs at least one of memory, cpus and pids"),
        ({"memory": "4GB"}, "sandbox.limits.memory: '4GB' is not a size"),
        ({"memory": "1MiB"}, "sandbox.limits.memory: at least 4MiB"),
        ({"cpus": True}, "sandbox.limits.cpus: expected a number of CPUs such as 2 or 0.5, got a boolean"),
        ({"cpus": "1.2345"}, "sandbox.limits.cpus: '1.2345' is not a number of CPUs"),
        ({"cpus": 0}, "sandbox.limits.cpus: between 0.001 and 1024"),
        ({"cpus": 2048}, "sandbox.limits.cpus: between 0.001 and 1024"),
        ({"pids": 2}, "sandbox.limits.pids: must be at least 8"),
        ({"pids": "512"}, "sandbox.limits.pids: expected an integer, got a string"),
        ({"swap": "1GiB"}, "sandbox.limits.swap: unknown key"),
    ],
)
def test_anything_else_is_refused_naming_the_key(value: object, message: str) -> None:
    with pytest.raises(ManifestError) as refused:
        read(value)
    assert refused.value.message.startswith(message)


def test_a_manifest_above_a_rule_is_denied_naming_the_key_and_the_rule() -> None:
    asked = Limits(memory=8 << 30, pids=100)
    limits, reasons = capped(asked, [("agents", Limits(memory=4 << 30, pids=512))])
    assert reasons == ("sandbox.limits.memory: 8GiB is above limits.memory of rule agents (4GiB)",)
    assert limits == asked


def test_a_key_the_manifest_leaves_out_takes_the_smallest_of_its_rules() -> None:
    rules = [("a", Limits(cpus=4000, pids=512)), ("b", Limits(cpus=2000)), ("c", NO_LIMITS)]
    limits, reasons = capped(Limits(memory=1 << 30), rules)
    assert reasons == ()
    assert limits == Limits(memory=1 << 30, cpus=2000, pids=512)
    _, above = capped(Limits(cpus=3000), rules)
    assert above == ("sandbox.limits.cpus: 3 is above limits.cpus of rule b (2)",)


def test_a_manifests_limits_hold_under_a_rule_without_limits() -> None:
    """Fail closed: a manifest may only narrow, so its limits are the session's even when no rule has any."""
    assert capped(Limits(pids=64), [("agents", NO_LIMITS)]) == (Limits(pids=64), ())
    assert capped(NO_LIMITS, [("agents", NO_LIMITS)]) == (NO_LIMITS, ())


MANIFEST = """
version: 1
task: fix-1
sandbox: {uid: 1000, gid: 1000, limits: {memory: 8GiB}}
credentials:
  - {name: kv, provider: vault, policies: [ci-read], num_uses: 10}
"""


def test_the_decision_is_denied_above_the_rule_and_carries_the_effective_limits(tmp_path: Path) -> None:
    policy = POLICY.replace("    max_ttl: 1h\n", "    max_ttl: 1h\n    limits: {memory: 4GiB, pids: 512}\n")
    denied = decision(tmp_path, MANIFEST, policy=policy)
    assert not denied.allowed
    assert denied.reasons == ("sandbox.limits.memory: 8GiB is above limits.memory of rule agents (4GiB)",)
    allowed = decision(tmp_path, MANIFEST.replace("8GiB", "1GiB"), policy=policy)
    assert allowed.allowed
    assert allowed.limits == Limits(memory=1 << 30, pids=512)
    assert allowed.to_json()["limits"] == {"memory": 1 << 30, "pids": 512, "reasons": []}
    assert decision_lines(allowed.to_json())[-1] == "  sandbox limits: memory 1GiB, pids 512"
    assert decision_lines(denied.to_json())[-2:] == [
        "  sandbox limits: denied",
        "    - sandbox.limits.memory: 8GiB is above limits.memory of rule agents (4GiB)",
    ]
