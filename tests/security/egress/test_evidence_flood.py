"""A sandbox cannot grow the signed issuance log without bound with requests its proxy refuses.

A request the operations refuse is answered by the proxy itself (nothing goes
upstream), so a sandbox can send them as fast as the proxy answers; each was
one ``egress.request`` record, fsynced into the log under ``state_dir``: 4 GB
an hour from one sandbox on one connection at a time, until the disk was full
and every session's proxy and every issue stopped. Here a real ``broker exec``
in bubblewrap (a root launcher, uid 1000 inside) floods plain-HTTP POSTs and
DELETEs at a host its rule limits to GET, with a small ``[egress]
evidence_budget`` so the test runs in seconds: past the budget the refusals
are summed, one counted record per (decision, host, method, rule) a minute,
and past the hard cap the proxy answers 503 and says so once
(``egress.evidence_exhausted``). Every request sent is counted in the log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from tests.fixtures.brokerenv import BrokerEnv, Result
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.recording_api import RecordingAPI
from tests.fixtures.sandbox import sandbox_unavailable

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

RULE = "agents-read-only"
POLICY = """
rules:
  - id: {rule}
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["127.0.0.1:{port}"]
    operations:
      http:
        "127.0.0.1:{port}": {{methods: [GET]}}
    grants:
      - provider: vault
        policies: ["ci-*"]
        max_uses: 100
"""
# The sandbox's client: standard-library python, one plain-HTTP request per connection through the session's
# proxy (as the review's reproduction did), following a plan of steps; it prints the statuses it got, in order.
INSIDE = r"""
import json, os, socket, sys, time
from urllib.parse import urlsplit
proxy = urlsplit(os.environ["http_proxy"])
port = int(sys.argv[1])
def one(method, path):
    s = socket.create_connection((proxy.hostname, proxy.port))
    s.sendall(f"{method} http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
              "Content-Length: 0\r\n\r\n".encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    return int(data.split(b" ", 2)[1]), data.partition(b"\r\n\r\n")[2].decode(errors="replace")
answers = []
for step in json.loads(sys.argv[2]):
    end = time.monotonic() + step.get("seconds", 0)
    for number in range(step.get("times", 10**9)):
        if "seconds" in step and time.monotonic() >= end:
            break
        status, body = one(step["method"], step["path"])
        answers.append([step["method"], status, body if status == 503 else ""])
        if status == step.get("until"):
            break
print(json.dumps(answers))
"""


@pytest.fixture
def upstream() -> Iterator[RecordingAPI]:
    api = RecordingAPI(None)  # plain HTTP: what a refused request never reaches
    yield api
    api.close()


def flood(env: BrokerEnv, api: RecordingAPI, budget: dict[str, object], plan: list[dict[str, Any]]) -> list[Any]:
    """``broker exec`` of the plan's client in bubblewrap under ``budget``; the answers it got, in order."""
    env.tables["egress"] = {"evidence_budget": budget}
    env.write_config()
    env.write_policy(POLICY.format(rule=RULE, port=api.port))
    network = f'network:\n  allow: ["127.0.0.1:{api.port}"]\ncredentials:'
    task = env.write_task(VAULT_TASK.replace("credentials:", network))
    argv = ["/usr/bin/python3", "-I", "-S", "-c", INSIDE, str(api.port), json.dumps(plan)]
    result: Result = env.run_process("exec", "--task", str(task), "--", *argv, timeout=240)
    assert result.code == 0, result.stderr[-2000:]
    return list(json.loads(result.stdout))


def session_records(env: BrokerEnv) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The exec's ``egress.request`` records and its other records, checked by ``audit verify`` first."""
    verified = env.run("audit", "verify")
    assert verified.code == 0, verified.stderr
    records = env.log_records()
    [session] = {r["session"] for r in records if r["event"] == "session.issued"}
    mine = [r for r in records if r["session"] == session]
    events = [r["event"] for r in mine]
    assert events[-1] == "session.revoked"  # every record of the session is in before its revocation
    return [r for r in mine if r["event"] == "egress.request"], [r for r in mine if r["event"] != "egress.request"]


def counted(records: list[dict[str, Any]]) -> int:
    """The requests the records stand for: one each, or a summed record's count."""
    return sum(int(r.get("count", 1)) for r in records)


def minute(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_flood_of_refused_requests_adds_a_bounded_number_of_records_that_count_every_request(
    vault_env: BrokerEnv, openbao: OpenBao, upstream: RecordingAPI
) -> None:
    budget = {"records": 40, "bytes": "1MiB", "cap": 4}
    plan = [
        {"method": "POST", "path": "/" + "a" * 1000, "seconds": 2},
        {"method": "DELETE", "path": "/x", "seconds": 1},
    ]
    answers = flood(vault_env, upstream, budget, plan)
    sent = len(answers)
    assert sent > 200, f"the sandbox sent only {sent} requests"  # far past the budget of 40
    assert {status for _, status, _ in answers} == {403}
    assert upstream.requests() == []  # nothing refused went upstream

    egress, _ = session_records(vault_env)
    single = [r for r in egress if "count" not in r]
    summed = [r for r in egress if "count" in r]
    assert len(single) == 40  # the budget: one record each
    # Past it, one record per (decision, host, method, rule) and minute: the flood spans at most two minutes.
    assert 1 <= len(summed) <= 4, [(r["method"], r["count"], r["window_start"]) for r in summed]
    keys = {(r["decision"], r["host"], r["method"], r["rule"]) for r in summed}
    assert keys <= {("refused", f"127.0.0.1:{upstream.port}", method, RULE) for method in ("POST", "DELETE")}
    for record in summed:
        start, end = minute(record["window_start"]), minute(record["window_end"])
        assert start.second == 0 and 0 <= (end - start).total_seconds() <= 60  # cut short at the end
        assert record["head_sha256"] is None and record["status"] == 403
    # Every request the sandbox sent is counted, and the log grew by those few records only.
    assert counted(egress) == sent
    size = sum(len(json.dumps(r)) for r in egress)
    assert size < (40 + 4) * 2500, size  # one record per request would have been over 1.7 KB each


def test_past_the_hard_cap_the_proxy_answers_503_and_says_so_once(
    vault_env: BrokerEnv, openbao: OpenBao, upstream: RecordingAPI
) -> None:
    budget = {"records": 10, "bytes": "1MiB", "cap": 2}  # a hard cap of 20 records
    plan = [
        {"method": "POST", "path": "/refused", "times": 15},  # 10 records, then one summed record
        {"method": "GET", "path": "/allowed", "times": 100, "until": 503},  # allowed: a record each, to the cap
        {"method": "GET", "path": "/after", "times": 5},
        {"method": "POST", "path": "/after", "times": 5},
    ]
    answers = flood(vault_env, upstream, budget, plan)
    statuses = [status for _, status, _ in answers]
    first = statuses.index(503)
    assert statuses[:15] == [403] * 15 and set(statuses[15:first]) == {200}
    assert statuses[first:] == [503] * (len(statuses) - first) and len(statuses) - first == 11
    assert {body for _, status, body in answers if status == 503} == {
        "broker egress proxy: this session's evidence cap is reached ([egress] evidence_budget),"
        " so nothing is forwarded\n"
    }
    allowed = first - 15
    assert upstream.requests() == [("GET", "/allowed")] * allowed  # nothing answered 503 went upstream

    egress, others = session_records(vault_env)
    [exhausted] = [r for r in others if r["event"] == "egress.evidence_exhausted"]
    assert (exhausted["cap_records"], exhausted["cap_bytes"]) == (20, 2 << 20)
    assert exhausted["records"] >= 20
    went = [(r["method"], r["path"], r["status"]) for r in egress if r["decision"] == "allowed"]
    assert went == [("GET", "/allowed", 200)] * allowed  # each forwarded request has its own record
    past_cap = [r for r in egress if r.get("status") == 503]
    assert len(past_cap) == 1 and past_cap[0]["count"] == 11 and past_cap[0]["host"] == "*"
    assert len(egress) <= 20 + 1 + 1  # the cap, a request under way when it was reached, the past-cap count
    assert counted(egress) == len(answers)
