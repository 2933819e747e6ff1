"""The decision on requests to an MCP host: heads, JSON-RPC bodies (split anywhere), batches, headers, records."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from broker.egress.operations import Decision, Kind
from broker.egress.operations.checker import OperationsChecker
from broker.egress.operations.mcp.check import decode_header
from tests.unit.egress.operations.test_mcp import RULE, ops

pytestmark = pytest.mark.unit

JSON = [(b"host", b"mcp.example.com"), (b"content-type", b"application/json")]


def checker() -> OperationsChecker:
    return OperationsChecker(ops(RULE), "r1")


def decide(
    body: bytes, headers: list[tuple[bytes, bytes]] = JSON, *, method: bytes = b"POST", cut: int = 0
) -> Decision:
    step = checker().check("mcp.example.com", 443, method, b"/mcp", headers)
    if isinstance(step, Decision):
        return step
    pieces = [body[:cut], body[cut:]] if cut else [body]
    for piece in pieces:
        decided = step.feed(piece)
        if decided is not None:
            return decided
    return step.end()


def call(name: str, arguments: dict[str, Any] | None = None, identity: object = 1) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": identity, "method": "tools/call", "params": params}


def body(document: object) -> bytes:
    return json.dumps(document).encode()


def answer(decision: Decision) -> Any:
    assert decision.answer is not None
    return json.loads(decision.answer.body)


PR = {"repo": "octo-org/widgets", "base": "agent/fix", "title": "t"}


@pytest.mark.parametrize("cut", [0, 1, 17, 40])
def test_an_allowed_call_passes_and_its_record_names_it_wherever_the_body_is_split(cut: int) -> None:
    decided = decide(body(call("create_pull_request", PR)), cut=cut)
    assert decided.allowed and decided.kind is Kind.MCP and decided.rewrite is None
    canonical = json.dumps(PR, sort_keys=True, separators=(",", ":")).encode()
    assert dict(decided.details) == {
        "mcp_method": "tools/call",
        "tool": "create_pull_request",
        "mcp_name": "create_pull_request",
        "arguments_sha256": hashlib.sha256(canonical).hexdigest(),
    }


def test_a_refused_call_is_a_jsonrpc_error_naming_the_rule_in_a_200() -> None:
    decided = decide(body(call("merge_pull_request", {}, "abc")))
    assert not decided.allowed and decided.answer is not None and decided.answer.status == 200
    assert decided.answer.content_type == "application/json"
    assert answer(decided) == {
        "jsonrpc": "2.0",
        "id": "abc",
        "error": {
            "code": -32001,
            "message": "refused by policy r1: tool merge_pull_request matches tools.deny merge_*",
        },
    }
    assert decided.details["tool"] == "merge_pull_request"


def test_the_other_checked_methods_and_what_passes() -> None:
    read = {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "repo://octo-org/w/README"}}
    assert decide(body(read)).allowed
    assert not decide(body({**read, "params": {"uri": "repo://other/w"}})).allowed
    subscribe = {**read, "method": "resources/subscribe", "params": {"uri": "repo://other/w"}}
    assert not decide(body(subscribe)).allowed
    prompt = {"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": {"name": "review"}}
    assert "prompt review is not in prompts.allow" in decide(body(prompt)).reason
    for passing in ("initialize", "ping", "completion/complete", "tools/list", "resources/templates/list"):
        assert decide(body({"jsonrpc": "2.0", "id": 4, "method": passing, "params": {}})).allowed, passing
    assert decide(body({"jsonrpc": "2.0", "method": "notifications/initialized"})).allowed
    assert decide(body({"jsonrpc": "2.0", "id": 5, "result": {}})).allowed  # an answer to the server's request


def test_a_list_request_gets_its_answer_filtered() -> None:
    decided = decide(body({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}))
    assert decided.allowed and decided.rewrite is not None


def test_a_batch_is_refused_whole_when_one_call_is_and_each_request_answered() -> None:
    batch = [
        call("search_code", {}, 1),
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
        call("delete_file", {}, 2),
    ]
    decided = decide(body(batch))
    assert not decided.allowed and decided.answer is not None and decided.answer.status == 200
    errors = answer(decided)
    assert [e["id"] for e in errors] == [1, 2] and {e["error"]["code"] for e in errors} == {-32001}
    assert "not sent, message 3 of a batch of 3: tool delete_file" in errors[0]["error"]["message"]
    assert errors[1]["error"]["message"] == "refused by policy r1: tool delete_file matches tools.deny delete_*"
    assert decided.details["mcp_method"] == "batch"
    calls = decided.details["mcp_calls"]
    assert isinstance(calls, list) and [c["decision"] for c in calls] == ["not sent", "not sent", "refused"]
    assert decide(body(batch[:2])).allowed


@pytest.mark.parametrize(
    ("document", "code", "reason"),
    [
        (b"{", -32700, "a body that is not JSON"),
        (b'{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "ping"}', -32700, "a key given twice"),
        (b"\xff", -32700, "not UTF-8"),
        (b"[]", -32600, "an empty JSON-RPC batch"),
        (body([call("get_issue", {}, n) for n in range(33)]), -32600, "batch of more than 32 messages"),
        (body([call("get_issue", {}, 1), call("get_issue", {}, 1)]), -32600, "two requests of one id"),
        (body({"jsonrpc": "1.0", "id": 1, "method": "ping"}), -32600, '"jsonrpc": "2.0"'),
        (body({"jsonrpc": "2.0", "id": True, "method": "ping"}), -32600, "a string or an integer"),
        (body({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}), -32600, "a string or an integer"),
        (body({"jsonrpc": "2.0", "id": 1, "method": "ping", "tool": "x"}), -32600, "a key it does not have"),
        (body({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []}), -32600, "params are a JSON object"),
        (body({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}), -32600, "without a string name"),
        (body(call("get_issue", [1])), -32600, "arguments that are not a JSON object"),  # type: ignore[arg-type]
        (body({**call("merge_x", {}), "id": None}), -32600, "a string or an integer"),
        (body({k: v for k, v in call("merge_x", {}).items() if k != "id"}), -32600, "tools/call as a notification"),
    ],
)
def test_what_is_not_jsonrpc_as_mcp_sends_it_is_a_400(document: bytes, code: int, reason: str) -> None:
    decided = decide(document)
    assert not decided.allowed and decided.answer is not None and decided.answer.status == 400
    error = answer(decided)["error"]
    assert error["code"] == code and reason in error["message"], error


def test_a_body_past_the_bound_is_a_413_without_holding_it() -> None:
    step = checker().check("mcp.example.com", 443, b"POST", b"/mcp", JSON)
    assert not isinstance(step, Decision)
    assert step.feed(b" " * (step.limit - 1)) is None
    decided = step.feed(b"  ")
    assert decided is not None and decided.answer is not None and decided.answer.status == 413
    assert "larger than 1048576 bytes" in answer(decided)["error"]["message"]


@pytest.mark.parametrize(
    ("method", "headers", "status", "reason"),
    [
        (b"POST", [(b"content-type", b"text/plain")], 415, "is application/json (Content-Type: text/plain)"),
        (b"POST", [], 415, "(Content-Type: none)"),
        (b"POST", [*JSON, (b"content-type", b"application/json")], 415, "Content-Type: application/json, appl"),
        (b"POST", [*JSON, (b"content-encoding", b"gzip")], 415, "content-encoded"),
        (b"POST", [*JSON, (b"mcp-method", b"a"), (b"Mcp-Method", b"b")], 400, "mcp-method is given twice"),
        (b"PUT", JSON, 405, "PUT is not MCP over streamable HTTP"),
        (b"GET", [(b"last-event-id", b"7")], 400, "a resumed event stream"),
    ],
)
def test_heads_mcp_does_not_send_are_refused(
    method: bytes, headers: list[tuple[bytes, bytes]], status: int, reason: str
) -> None:
    decided = decide(body(call("get_issue", {})), headers, method=method)
    assert not decided.allowed and decided.answer is not None and decided.answer.status == status
    assert reason in decided.reason


def test_get_and_delete_pass() -> None:
    assert decide(b"", [(b"accept", b"text/event-stream")], method=b"GET").allowed
    assert decide(b"", [], method=b"DELETE").allowed


@pytest.mark.parametrize(
    ("headers", "allowed"),
    [
        ([(b"mcp-method", b"tools/call"), (b"mcp-name", b"search_code")], True),
        ([(b"mcp-method", b"tools/call"), (b"mcp-name", b"=?base64?c2VhcmNoX2NvZGU=?=")], True),
        ([(b"mcp-method", b"tools/list")], False),
        ([(b"mcp-name", b"get_issue")], False),
        ([(b"mcp-name", b"=?base64?c2VhcmNoX2NvZGU?=")], False),  # not canonical base64
    ],
)
def test_mcp_method_and_mcp_name_must_say_what_the_body_says(headers: list[tuple[bytes, bytes]], allowed: bool) -> None:
    decided = decide(body(call("search_code", {})), [*JSON, *headers])
    assert decided.allowed is allowed
    if not allowed:
        assert decided.answer is not None and decided.answer.status == 400
        assert answer(decided)["id"] == 1 and decided.details["tool"] == "search_code"


def test_mcp_headers_with_a_batch_are_refused_and_base64_names_are_read_as_the_sdk_writes_them() -> None:
    decided = decide(body([call("search_code", {})]), [*JSON, (b"mcp-method", b"tools/call")])
    assert not decided.allowed and "with a batch" in decided.reason
    assert decode_header(b"=?base64?w6k=?=") == "\u00e9" and decode_header(b"plain") == "plain"
    assert decode_header(b"=?base64?//79?=") is None  # not UTF-8
