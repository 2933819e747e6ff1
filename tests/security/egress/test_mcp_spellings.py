"""Other spellings of a refused MCP call, and bodies the check cannot read for sure: none reaches the server.

Through a session's proxy (``tests/fixtures/mcp_stage.py``) to the SDK's MCP
server, whose rule denies ``merge_*`` and holds ``create_pull_request`` to
``agent/*`` bases: a denied tool spelled in another case or with a JSON
escape, hidden in a batch behind an allowed call, named twice in one object,
named otherwise by ``Mcp-Name`` than by the body, an argument walking out of
its glob with ``..``, a call sent as a notification, a body of another
content type, and one past the check's bound. Each gets the proxy's own
answer; the server's record of what reached it stays empty.
"""

from __future__ import annotations

import json

import pytest

from tests.fixtures.mcp_stage import Stage, mcp_stage, mcp_upstream

__all__ = ["mcp_stage", "mcp_upstream"]
pytestmark = pytest.mark.server

MERGE = {"owner": "octo-org", "repo": "widgets", "pull_number": 7}
PR = {"owner": "octo-org", "repo": "widgets", "title": "t", "head": "agent/x"}


def call(name: str, arguments: dict[str, object], identity: int = 1) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": identity, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def dumps(document: object) -> bytes:
    return json.dumps(document).encode()


CASES: dict[str, tuple[bytes, dict[str, str], int, int, str]] = {
    "another case": (dumps(call("MERGE_PULL_REQUEST", MERGE)), {}, 200, -32001, "matches tools.deny merge_*"),
    "a JSON escape": (
        dumps(call("merge_pull_request", MERGE)).replace(b"merge_pull", b"merge\\u005fpull"),
        {},
        200,
        -32001,
        "tool merge_pull_request matches tools.deny",
    ),
    "behind an allowed call in a batch": (
        dumps([call("get_issue", {"owner": "octo-org", "repo": "widgets", "number": 1}, 1), call("merge_x", {}, 2)]),
        {},
        200,
        -32001,
        "not sent, message 2 of a batch of 2",
    ),
    "named twice": (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue","name":"merge_pull_request",'
        b'"arguments":{}}}',
        {},
        400,
        -32700,
        "a JSON object with a key given twice",
    ),
    "Mcp-Name naming an allowed tool": (
        dumps(call("merge_pull_request", MERGE)),
        {"Mcp-Method": "tools/call", "Mcp-Name": "get_issue"},
        400,
        -32600,
        "the Mcp-Name header does not name what the body names",
    ),
    "a .. segment out of the base glob": (
        dumps(call("create_pull_request", {**PR, "base": "agent/../main"})),
        {},
        200,
        -32001,
        "argument base is a value holding a . or .. segment",
    ),
    "a notification": (
        dumps({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "merge_pull_request", "arguments": {}}}),
        {},
        400,
        -32600,
        "tools/call as a notification",
    ),
    "text/plain": (
        dumps(call("merge_pull_request", MERGE)),
        {"Content-Type": "text/plain"},
        415,
        -32600,
        "an MCP POST is application/json",
    ),
    "past the bound": (
        dumps(call("get_issue", {"owner": "octo-org", "repo": "widgets", "number": 1, "pad": "x" * (1 << 20)})),
        {},
        413,
        -32600,
        "larger than 1048576 bytes cannot be checked",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_proxy_answers_and_the_server_never_sees_it(mcp_stage: Stage, case: str) -> None:
    body, headers, status, code, reason = CASES[case]
    before = len(mcp_stage.upstream.server.calls())
    got, answer_headers, answer = mcp_stage.post(body, headers)
    assert got == status and answer_headers["content-type"] == "application/json", answer
    document = json.loads(answer)
    errors = document if isinstance(document, list) else [document]
    assert all(e["error"]["code"] == code for e in errors), document
    assert any(reason in e["error"]["message"] for e in errors), document
    assert mcp_stage.upstream.server.calls()[before:] == []
    [record] = mcp_stage.records(1)
    assert (record["decision"], record["operations"], record["upstream_status"]) == ("refused", "mcp", None)


def test_the_allowed_spelling_goes_through_with_the_real_token(mcp_stage: Stage) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    status, headers, _ = mcp_stage.post(dumps(init))
    assert status == 200, headers
    [seen] = mcp_stage.upstream.server.calls()[-1:]
    assert (seen.method, seen.bearer) == ("initialize", mcp_stage.upstream.token)
