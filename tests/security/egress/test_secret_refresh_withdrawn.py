"""A ``kind: secret`` stops following its KV versions once the operator withdraws its grant from the running exec.

In bubblewrap, curl keeps calling a TLS service with the placeholder of a
key kept in OpenBao's KV v2 (``[egress] secret_refresh`` at one second).
Mid-run the operator removes the key's path from the rule's
``secret_paths`` (``broker policy check`` of the task now denies it), then
writes a new version of the key. The exec used to decide with the policy it
read when it started: the new value was read, logged as issued and renewed,
and sent to the service. Now the service never receives it: the proxy keeps
the value it had (no request fails), ``credential.renewal_denied`` is
logged for the credential, and ``session.policy_withdrawn`` once.
"""

from __future__ import annotations

from tests.fixtures.recording_api import RecordingAPI
from tests.integration.egress.test_any_service import key, service_policy
from tests.integration.egress.test_secret_refresh import Stage, lines, stage

__all__ = ["stage"]  # fixture


def _withdrawn_policy(api: RecordingAPI) -> str:
    return service_policy(api.port, paths='["nothing/*"]')


def test_a_new_kv_version_is_not_swapped_in_once_the_grant_is_withdrawn(stage: Stage) -> None:
    second = key("sk-proj-", 64)
    checked: list[int] = []

    def withdraw_then_rotate() -> None:
        stage.env.write_policy(_withdrawn_policy(stage.api))  # the operator takes the path away
        task = stage.env.root / "task.yaml"
        checked.append(stage.env.run_process("policy", "check", "--task", str(task)).code)
        stage.kv().create_or_update_secret(path=stage.path, secret={"api_key": second})  # then rotates the key

    result = stage.run(withdraw_then_rotate)
    assert result.code == 0, result.stderr
    assert checked == [3]  # a new session of the task is denied now
    statuses = [v for k, v in lines(result) if k == "status"]
    assert statuses and set(statuses) == {"200"}, statuses  # the old value stays in use
    sent = stage.sent()
    assert f"Bearer {second}" not in sent, "the new value reached the service after the grant was withdrawn"
    assert set(sent) == {f"Bearer {stage.first}"}
    records = stage.env.log_records()
    events = [r["event"] for r in records]
    assert "credential.renewed" not in events
    assert [r["reference"]["version"] for r in records if r["event"] == "credential.issued"] == ["1"]
    [denied] = [r for r in records if r["event"] == "credential.renewal_denied"]
    assert denied["credential"] == "openai" and "secret_paths" in denied["reason"]
    [withdrawn] = [r for r in records if r["event"] == "session.policy_withdrawn"]
    assert withdrawn["session"] == denied["session"]
    assert second not in stage.env.log_path.read_text()
    assert stage.env.run("audit", "verify").code == 0
