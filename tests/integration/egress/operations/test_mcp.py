"""``operations: mcp`` through the session's proxy, with the official SDK's client against an SDK server behind TLS.

The server (``devstack.mcp.server``) takes a bearer token the client never
holds: the proxy swaps the placeholder for it. The rule is the README's
example: read tools and ``create_pull_request`` onto ``agent/*`` bases of
``octo-org``, never a merge or a deletion; ``octo-org``'s resources; the
``review_*`` prompts. Both kinds of answer are exercised: a client that opens
a session (``legacy``) gets SSE answers, one on MCP's 2026 protocol
(``auto``) JSON answers and sends ``Mcp-Method``/``Mcp-Name``.
"""

from __future__ import annotations

import pytest

from tests.fixtures.mcp_stage import RULE_ID, Stage, check_agent, mcp_stage, mcp_upstream

__all__ = ["mcp_stage", "mcp_upstream"]
pytestmark = pytest.mark.server


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_sdk_client_gets_filtered_lists_and_refusals_it_shows(mcp_stage: Stage, mode: str) -> None:
    before = len(mcp_stage.upstream.server.calls())
    check_agent(mcp_stage.agent(mode))
    reached = mcp_stage.upstream.server.calls()[before:]
    # What was refused never reached the server; what reached it carried the real token, never the placeholder.
    names = [
        (seen.method, seen.name) for seen in reached if seen.method in ("tools/call", "resources/read", "prompts/get")
    ]
    assert names == [
        ("tools/call", "get_issue"),
        ("tools/call", "create_pull_request"),
        ("resources/read", "repo://octo-org/widgets/README.md"),
        ("prompts/get", "review_pull_request"),
    ]
    assert [s.arguments["base"] for s in reached if s.name == "create_pull_request"] == ["agent/release"]
    assert {seen.bearer for seen in reached} == {mcp_stage.upstream.token}


def test_each_call_is_a_record_with_its_method_tool_and_arguments_digest(mcp_stage: Stage) -> None:
    mcp_stage.agent("auto")
    records = [r for r in mcp_stage.records(12) if r.get("mcp_method")]
    calls = [(r["mcp_method"], r["tool"], r["decision"]) for r in records if r["mcp_method"] == "tools/call"]
    assert calls == [
        ("tools/call", "get_issue", "allowed"),
        ("tools/call", "create_pull_request", "allowed"),
        ("tools/call", "create_pull_request", "refused"),
        ("tools/call", "merge_pull_request", "refused"),
    ]
    for record in records:
        assert record["operations"] == "mcp" and record["rule"] == RULE_ID
        # The token went into what was forwarded alone: a refusal never reached the credential step.
        assert record["credential"] == ("mcp" if record["decision"] == "allowed" else None)
        assert (record["arguments_sha256"] is not None) == (record["mcp_method"] == "tools/call")
    digests = [r["arguments_sha256"] for r in records if r["tool"] == "create_pull_request"]
    assert len(set(digests)) == 2 and all(len(d) == 64 for d in digests)
    refusals = [r for r in records if r["decision"] == "refused"]
    assert {(r["status"], r["upstream_status"]) for r in refusals} == {(200, None)}
    assert {r["mcp_method"] for r in refusals} == {"tools/call", "resources/read", "prompts/get"}
