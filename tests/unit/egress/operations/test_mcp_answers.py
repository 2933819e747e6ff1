"""List answers without what is not allowed: JSON held whole, SSE event by event, split anywhere."""

from __future__ import annotations

import json
from typing import Any

import pytest

from broker.egress.operations.decision import AnswerRefused
from broker.egress.operations.mcp.answers import MAX_HELD, list_answers
from tests.unit.egress.operations.test_mcp import RULE, ops

pytestmark = pytest.mark.unit

TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("search_code", "merge_pull_request", "get_issue")]
LISTED = {
    "jsonrpc": "2.0",
    "id": 7,
    "result": {"tools": [*TOOLS, {"name": 5}, "junk", {"title": "no name"}], "nextCursor": "c"},
}
JSON_HEAD = [(b"content-type", b"application/json"), (b"content-length", b"999")]
SSE_HEAD = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


def rewrite(asked: dict[Any, str] | None = None) -> Any:
    return list_answers(ops(RULE).mcp[0], asked or {7: "tools/list"})


def run(data: bytes, head: list[tuple[bytes, bytes]], cut: int = 0, asked: dict[Any, str] | None = None) -> bytes:
    answer = rewrite(asked)
    headers = answer.head(200, head)
    assert all(name != b"content-length" for name, _ in headers)
    pieces = [data[i : i + cut] for i in range(0, len(data), cut)] if cut else [data]
    out: bytes = b"".join(answer.feed(piece) for piece in pieces) + answer.end()
    return out


def names(message: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in message["result"]["tools"]]


@pytest.mark.parametrize("cut", [0, 1, 7, 64])
def test_a_json_answer_loses_the_tools_the_session_may_not_call(cut: int) -> None:
    out = json.loads(run(json.dumps(LISTED).encode(), JSON_HEAD, cut))
    assert names(out) == ["search_code", "get_issue"] and out["result"]["nextCursor"] == "c"


def test_a_batch_answer_and_other_ids_and_types() -> None:
    other = {"jsonrpc": "2.0", "id": "7", "result": {"tools": TOOLS}}  # "7" is not 7
    out = json.loads(run(json.dumps([other, LISTED]).encode(), JSON_HEAD))
    assert names(out[0]) == [t["name"] for t in TOOLS] and names(out[1]) == ["search_code", "get_issue"]
    resources = {"jsonrpc": "2.0", "id": 8, "result": {"resources": [{"uri": "repo://octo-org/w"}, {"uri": "x://y"}]}}
    kept = json.loads(run(json.dumps(resources).encode(), JSON_HEAD, asked={8: "resources/list"}))
    assert kept["result"]["resources"] == [{"uri": "repo://octo-org/w"}]
    prompts = {"jsonrpc": "2.0", "id": 9, "result": {"prompts": [{"name": "review"}]}}
    assert (
        json.loads(run(json.dumps(prompts).encode(), JSON_HEAD, asked={9: "prompts/list"}))["result"]["prompts"] == []
    )
    unchanged = json.dumps({"jsonrpc": "2.0", "id": 7, "error": {"code": 1, "message": "no"}}).encode()
    assert run(unchanged, JSON_HEAD) == unchanged


@pytest.mark.parametrize("cut", [0, 1, 3, 50])
@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
def test_an_event_stream_is_rewritten_event_by_event_then_streams(cut: int, end: bytes) -> None:
    listed = json.dumps(LISTED, indent=1).encode().split(b"\n")  # one document over several data lines
    note = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{}}'
    stream = end.join(
        [b": a comment", b"event: message", b"data: " + note, b"", b"id: 1", b"event: message"]
        + [b"data: " + line for line in listed]
        + [b"", b"data: after", b"", b""]
    )
    out = run(stream, SSE_HEAD, cut)
    events = [e for e in out.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n\n") if e]
    assert events[0] == b": a comment\nevent: message\ndata: " + note
    lines = events[1].split(b"\n")
    assert lines[:2] == [b"id: 1", b"event: message"]
    assert names(json.loads(lines[2].removeprefix(b"data: "))) == ["search_code", "get_issue"]
    assert events[2] == b"data: after"


def test_what_cannot_be_filtered_is_refused_and_other_answers_pass() -> None:
    with pytest.raises(AnswerRefused, match="neither JSON nor an event stream"):
        rewrite().head(200, [(b"content-type", b"text/html")])
    with pytest.raises(AnswerRefused, match="content-encoded"):
        rewrite().head(200, [*JSON_HEAD, (b"content-encoding", b"gzip")])
    answer = rewrite()
    assert answer.head(401, JSON_HEAD) == JSON_HEAD and answer.feed(b"x") == b"x"
    big = rewrite()
    big.head(200, JSON_HEAD)
    with pytest.raises(AnswerRefused, match=f"longer than {MAX_HELD} bytes"):
        for _ in range(5):
            big.feed(b" " * (1 << 20))


def test_a_json_body_that_does_not_parse_goes_as_it_came() -> None:
    assert run(b"{not json", JSON_HEAD) == b"{not json"
