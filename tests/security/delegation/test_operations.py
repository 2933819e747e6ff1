"""A child session's proxy is limited by its parent's operations: a child cannot get back what its parent's
manifest (or its rule) narrowed away, and one that asks for more is refused naming the widening key.

Before this, a child's decision carried no operations at all, so its proxy let a push to any ref of an allowed
host through where the parent's refused it.
"""

from __future__ import annotations

from typing import Any

from broker.core.delegation.coverage import cover
from broker.core.inputs.config import Config
from broker.egress.operations import Operations, read_operations
from broker.vocab.errors import PolicyFileError
from broker.vocab.fields import Fields
from tests.security.delegation.test_widening import GITHUB, NOW, _manifest, _parent, config

__all__ = ["config"]

AGENT_BRANCHES = {"git": {"hosts": ["github.com:443"], "push": ["refs/heads/agent/*"], "delete": False}}


def operations(document: dict[str, Any]) -> Operations:
    return read_operations(Fields({"operations": document}, "rules[0]", PolicyFileError).mapping("operations"))


def test_a_child_that_asks_for_nothing_keeps_its_parents_operations(config: Config) -> None:
    parent, parent_manifest, held = _parent(config)
    child = _manifest(config, [GITHUB], network={"allow": ["github.com:443"]})
    reasons, decision = cover(config, parent, parent_manifest, held, child, NOW, operations(AGENT_BRANCHES))
    assert reasons == [] and decision is not None
    assert decision.operations == operations(AGENT_BRANCHES)
    assert not decision.operations.empty


def test_a_child_that_widens_its_parents_operations_is_refused_naming_the_key(config: Config) -> None:
    parent, parent_manifest, held = _parent(config)
    wider = {"git": {"hosts": ["github.com:443"], "push": ["refs/heads/main"], "delete": True}}
    child = _manifest(config, [GITHUB], network={"allow": ["github.com:443"]}, operations=wider)
    reasons, decision = cover(config, parent, parent_manifest, held, child, NOW, operations(AGENT_BRANCHES))
    assert decision is None
    keys = [reason.split(": ", 1)[0] for reason in reasons]
    assert keys == ["operations.git.push[0]", "operations.git.delete"], reasons


def test_a_child_may_narrow_its_parents_operations_further(config: Config) -> None:
    parent, parent_manifest, held = _parent(config)
    narrower = {"git": {"hosts": ["github.com:443"], "push": ["refs/heads/agent/fix-1"]}}
    child = _manifest(config, [GITHUB], network={"allow": ["github.com:443"]}, operations=narrower)
    reasons, decision = cover(config, parent, parent_manifest, held, child, NOW, operations(AGENT_BRANCHES))
    assert reasons == [] and decision is not None
    pushes = [glob for section in decision.operations.git for glob in section.push]
    assert str(pushes[0]) == "refs/heads/agent/fix-1"
