"""Property-based test of ``issue`` end to end: on hostile input (``strategies.py``) it exits 2 (or 3 when the
input happens to be valid: the policy denies every task) with exactly one ``broker: error:`` line and mints
nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import event, given

from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.net import closed_port
from tests.security.inputs.strategies import CLI, manifest_inputs, providers_table

#: Every valid task is denied: task names never start with '-'.
DENY_ALL_POLICY = """
rules:
  - id: nothing
    tasks: ["-never"]
    grants:
      - {provider: vault, policies: ["-none"]}
"""


@pytest.fixture(scope="module")
def deny_all_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerEnv]:
    """Providers at a closed port and a policy denying every valid task: nothing can ever be minted."""
    env = make_env(tmp_path_factory.mktemp("cli"))
    for name, table in providers_table(f"http://127.0.0.1:{closed_port()}").items():
        env.add_provider(name, table)
    env.write_policy(DENY_ALL_POLICY)
    try:
        yield env
    finally:
        env.cleanup()


@CLI
@given(case=manifest_inputs())
def test_issue_refuses_hostile_input_in_one_line_and_mints_nothing(
    deny_all_env: BrokerEnv, case: tuple[bytes, bool]
) -> None:
    data, as_json = case
    task = deny_all_env.root / ("task.json" if as_json else "task.yaml")
    task.write_bytes(data)
    before = len(deny_all_env.log_records())
    result = deny_all_env.run("issue", "--task", str(task))
    assert result.code in (2, 3), result.stderr
    event(f"exit {result.code}")
    assert result.stdout == ""
    assert result.stderr.startswith("broker: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert deny_all_env.session_dirs() == []
    events = [r["event"] for r in deny_all_env.log_records()[before:]]
    assert "credential.issued" not in events
    assert events[:1] == (["session.denied"] if result.code == 3 else [])
