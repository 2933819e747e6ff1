"""A sandbox hammering its ``broker.sock``: children a minute are ``delegate_rate``, refusals are 429, the log stays
small.

The 64 live children never bound a sandbox that revokes each child at once:
before ``delegate_rate``, one connection created and revoked ~5 children a
second (each a real Vault token minted and revoked, four records and two
checkpoints), and each ``POST /v1/policy/check`` of a manifest with 200
destinations the parent lacks appended a 15 KB ``session.denied`` record and a
signed checkpoint. Here the sandbox is a real ``broker exec`` in bubblewrap
(uid 1000) running python against the socket, the broker mints from OpenBao,
and the rule says only ``delegate: true`` (the defaults: 10 a minute, 256 in all).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.delegating import DELEGATE_POLICY, PARENT_TASK, SOCKET_CLIENT, child
from tests.fixtures.openbao import OpenBao
from tests.fixtures.sandbox import python_runtime, sandbox_unavailable

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

RATE = 10  # the default delegate_rate
CHURN = r"""
end, statuses, made, refusals = time.time() + SECONDS, Counter(), 0, []
while time.time() < end:
    status, body = call("POST", "/v1/sessions", CHILD)
    statuses[status] += 1
    if status == 201:
        made += 1
        call("DELETE", "/v1/sessions/" + json.loads(body)["session"])
    elif len(refusals) < 2:
        refusals.append(json.loads(body))
print(json.dumps({"made": made, "statuses": statuses, "refusals": refusals}))
"""
CHECKS = r"""
answers = []
for _ in range(15):  # covered: minting nothing, logging nothing, they cost no budget
    answers.append(call("POST", "/v1/policy/check", NARROW)[0])
first = [call("POST", "/v1/policy/check", manifest) for manifest in [WIDE] * 4 + [OTHER] * 2]
end, statuses, last = time.time() + SECONDS, Counter(), None
while time.time() < end:
    status, body = call("POST", "/v1/policy/check", WIDE)
    statuses[status] += 1
    last = json.loads(body)
print(json.dumps({"covered": answers, "first": [[s, json.loads(b)] for s, b in first], "statuses": statuses,
                  "last": last}))
"""


def _run(env: BrokerEnv, tmp_path: Path, program: str, **values: Any) -> dict[str, Any]:
    """``program`` run by python in the sandbox of a delegating ``broker exec``, with ``values`` defined."""
    env.write_policy(DELEGATE_POLICY.format(depth=1))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    python, prefix = python_runtime()
    defined = "".join(f"{name} = json.loads({json.dumps(json.dumps(value))})\n" for name, value in values.items())
    task = env.write_task(PARENT_TASK)
    result = env.run_process(
        "exec", "--task", str(task), "--workspace", str(workspace), "--ro-bind", prefix,
        "--", python, "-I", "-c", SOCKET_CLIENT + defined + program,
        timeout=240,
    )  # fmt: skip
    assert result.code == 0, result.stdout + result.stderr
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def _wide(destinations: int) -> dict[str, Any]:
    """A child asking for ``destinations`` hosts its parent cannot reach: each one a widening key."""
    return child(network={"allow": [f"10.{i // 250}.{i % 250}.1:443" for i in range(destinations)]})


def test_a_sandbox_creating_and_revoking_children_in_a_loop_gets_delegate_rate_of_them(
    vault_env: BrokerEnv, openbao: OpenBao, tmp_path: Path
) -> None:
    answer = _run(vault_env, tmp_path, CHURN, SECONDS=6, CHILD=child())
    statuses = {int(status): count for status, count in answer["statuses"].items()}
    assert answer["made"] == RATE, answer  # the review saw 79 in 15 s
    assert set(statuses) == {201, 429} and statuses[201] == RATE, statuses
    refusal = answer["refusals"][0]
    assert refusal["exit_code"] == 3 and "may ask for 10 children a minute (delegate_rate)" in refusal["error"]
    assert "retry in" in refusal["error"] and "\n" not in refusal["error"]

    records = vault_env.log_records()
    parent = next(r["session"] for r in records if r["event"] == "session.issued")
    children = [r for r in records if r["event"] == "session.issued" and r.get("parent") == parent]
    minted = [r for r in records if r["event"] == "credential.issued" and r.get("parent") == parent]
    assert len(children) == len(minted) == RATE  # Vault tokens minted for the sandbox: the rate's, no more
    assert {r["outcome"] for r in records if r["event"] == "credential.revoked"} == {"revoked"}
    # one record for the refusals of the minute, then their count when the socket closed: never one each
    limited = [r for r in records if r["event"] == "session.denied"]
    assert [(r["parent"], r["limit"]) for r in limited] == [(parent, "rate")]
    [counted] = [r for r in records if r["event"] == "delegation.refused"]
    refused = statuses[429]
    assert counted["session"] == parent and counted["refused"] == {"rate": refused}
    assert counted["unlogged"] == {"rate": refused - 1}
    assert len(records) < 8 * RATE  # issued, minted, revoked and signed: what ten children take, whatever refused
    assert vault_env.run("audit", "verify").code == 0


def test_a_sandbox_repeating_wide_policy_checks_gets_one_small_record_per_manifest_and_then_429(
    vault_env: BrokerEnv, openbao: OpenBao, tmp_path: Path
) -> None:
    values = {"SECONDS": 4, "NARROW": child(), "WIDE": _wide(200), "OTHER": _wide(150)}
    answer = _run(vault_env, tmp_path, CHECKS, **values)
    assert answer["covered"] == [200] * 15  # more than the rate: a covered check is given back
    for status, body in answer["first"]:
        assert status == 403 and body["exit_code"] == 3 and "network.allow[0]" in body["error"], body
        assert len(body["error"]) < 1200  # the answer names the first keys and how many more
    statuses = {int(status): count for status, count in answer["statuses"].items()}
    assert statuses[403] == RATE - 6 and set(statuses) == {403, 429}, statuses  # six spent above
    assert "delegate_rate" in answer["last"]["error"]

    records = vault_env.log_records()
    parent = next(r["session"] for r in records if r["event"] == "session.issued")
    denied = [r for r in records if r["event"] == "session.denied" and "limit" not in r]
    assert [(r["parent"], r["reasons_total"]) for r in denied] == [(parent, 200), (parent, 150)]
    for record in denied:  # bounded whatever the manifest: the first keys and its digest
        assert len(json.dumps(record)) < 3000 and len(record["reasons"]) <= 8
        assert record["reasons"][0].startswith("network.allow[0]: 10.0.0.1:443 is not among")
        assert len(record["manifest_sha256"]) == 64
    assert denied[0]["manifest_sha256"] != denied[1]["manifest_sha256"]
    [limited] = [r for r in records if r["event"] == "session.denied" and "limit" in r]
    assert limited["limit"] == "rate"
    # no checkpoint of their own: the exec's own (issue, start, end) sign them
    assert sum(1 for r in records if r["event"] == "checkpoint") <= 3
    [counted] = [r for r in records if r["event"] == "delegation.refused"]
    assert counted["refused"] == {"rate": statuses[429], "wider": RATE}
    assert counted["unlogged"] == {"rate": statuses[429] - 1, "wider": RATE - 2}
    assert vault_env.run("audit", "verify").code == 0
