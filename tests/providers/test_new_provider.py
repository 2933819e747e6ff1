"""A new provider type is one module (or package) and one registry entry: nothing in ``broker/`` changes.

``tests.providers.memory`` has the contract alone and no capability, so the
core's every ``isinstance(provider, Capability)`` takes its other branch:
no warm-up, no reservation, no planned reference, no locks, no grant checks.
Issue, revoke, doctor, the reference and ``broker init`` take it as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.cli.manual import render
from broker.core.credential.proxied import ca_hint_names
from broker.core.inputs.manifest import reserved_env
from broker.core.setup.install import render_config
from providers.capabilities import CAPABILITIES
from providers.registry import PROVIDER_TYPES, provider_class
from tests.fixtures.brokerenv import BrokerEnv
from tests.providers.memory import SERVER, MemoryProvider

POLICY = """
rules:
  - id: builds
    tasks: ["fix-*"]
    sandbox_uids: ["0-65534"]
    sandbox_gids: ["0-65534"]
    grants:
      - provider: mem
        labels: [build]
"""
TASK = """
version: 1
task: fix-build-9
sandbox: {uid: 1000, gid: 1000}
credentials:
  - {name: ci, provider: mem, label: build}
"""


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The one line a new provider type adds to ``providers/registry.py``, for this test."""
    monkeypatch.setitem(PROVIDER_TYPES, "memory", "tests.providers.memory:MemoryProvider")
    for cached in (reserved_env, ca_hint_names):
        cached.cache_clear()
    yield
    for cached in (reserved_env, ca_hint_names):
        cached.cache_clear()


def test_it_has_no_capability() -> None:
    provider = MemoryProvider("mem")
    assert [c.__name__ for c in CAPABILITIES if isinstance(provider, c)] == []


@pytest.mark.root
def test_a_provider_without_capabilities_issues_and_revokes_through_the_core(
    registered: None, broker_env: BrokerEnv
) -> None:
    assert provider_class("memory") is MemoryProvider
    broker_env.add_provider("mem", {"type": "memory"})
    broker_env.write_policy(POLICY)
    task = broker_env.write_task(TASK)

    issued = broker_env.run("issue", "--task", str(task), "--json")
    assert issued.code == 0, issued.stderr
    document = issued.json()
    [credential] = document["credentials"]
    assert (credential["type"], credential["scope"]) == ("memory", {"label": "build"})
    token = (Path(document["dir"]) / "ci" / "token").read_text()
    assert token.startswith("mem_")
    [ident] = [i for i, state in SERVER.items() if state == "valid"]

    revoked = broker_env.run("revoke", "--session", document["session"], "--json")
    assert revoked.code == 0, revoked.stderr
    assert SERVER[ident] == "revoked"
    assert "session.revoked" in broker_env.events()

    doctor = broker_env.run("doctor", "--json").json()
    [health] = [c for c in doctor["checks"] if c["name"].startswith("providers.mem.")]
    assert health == {
        "name": "providers.mem.health",
        "ok": True,
        "detail": "not checked: memory has no health checks",
        "fix": None,
    }


def test_its_keys_and_example_reach_the_reference_and_broker_init(registered: None) -> None:
    reference = render()
    assert '### Config: [providers.NAME] type = "memory"' in reference
    assert "| `label` | string | no |  | memory: what the token is for. |" in reference
    assert "| `labels` | list | no |  | memory: the labels a token may carry. |" in reference
    config = render_config(Path("/etc/broker"), Path("/var/lib/broker"), Path("/run/broker"))
    assert '# [providers.memory]\n# type = "memory"\n' in config
    assert "table's name (vault, aws, github, oauth, modelx, memory)" in config
