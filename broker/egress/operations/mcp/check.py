"""The decision on one request to an MCP host (streamable HTTP): its head, then the JSON-RPC messages of a POST.

On the head: a ``POST`` is JSON (``Content-Type: application/json``, not
content-encoded), with at most one of each of ``Mcp-Method``, ``Mcp-Name``
and ``MCP-Protocol-Version``, and its body decides (``McpBodyCheck``, held
to ``MAX_BODY`` bytes); a ``GET`` (the server's event stream) and a
``DELETE`` (the end of a session) pass, but for a ``GET`` resuming a stream
(``Last-Event-ID``: the answers on it could not be matched to the requests
they answer); every other method is refused.

The body (``jsonrpc``): each message is read strictly; ``Mcp-Method`` and
``Mcp-Name``, when present, must say what the body says (one message, its
method; the tool's or the prompt's name, or the resource's URI, the base64
form of the header decoded as MCP's SDK writes it); then each request is
decided: ``tools/call`` by the tool's name and its arguments
(``McpOperations.tool_refusal``), ``resources/read`` and
``resources/subscribe`` by the URI, ``prompts/get`` by the prompt's name.
Those methods as notifications (no id) are malformed. Everything else
(``initialize``, ``ping``, the lists, notifications, responses to the
server's requests) passes; the lists' answers are filtered
(``answers.ListAnswers``).

A batch is refused whole when any of its messages is: each of its requests
is answered with an error of its own (the refused ones naming the rule,
the others saying they were not sent), so nothing of a batch is half done.

Refusals are JSON-RPC error responses: a refused call is ``-32001`` in a
``200`` answer, which MCP clients show as the call's error; a body that is
not JSON-RPC as MCP sends it is ``-32700`` or ``-32600`` with ``400``; a
body past the bound ``413``, a body of another type ``415``, a method MCP
does not use ``405``. The record's ``details``: ``mcp_method``, ``tool``,
``mcp_name`` (what the method names) and ``arguments_sha256`` (of the
call's arguments in canonical JSON: keys sorted, no spaces, UTF-8) for one
message; for a batch ``mcp_method`` ``batch`` and ``mcp_calls``, each
message's fields and decision.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from broker.egress.operations.decision import Answer, Decision, Kind, allowed, clipped
from broker.egress.operations.jsonbody import JsonError, strict_json
from broker.egress.operations.mcp.answers import LISTS, list_answers
from broker.egress.operations.mcp.jsonrpc import (
    INVALID_REQUEST,
    PARSE_ERROR,
    REFUSED,
    JsonRpcError,
    Message,
    RequestId,
    dumps,
    error_object,
    read_messages,
)
from broker.egress.operations.mcp.model import McpOperations

MAX_BODY = 1024 * 1024
JSON = "application/json"
#: The method whose params name what it is about, and that param (``Mcp-Name`` carries it).
NAMES = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri", "resources/subscribe": "uri"}
ROUTING = (b"mcp-method", b"mcp-name", b"mcp-protocol-version")
_SENTINEL = re.compile(r"=\?base64\?(.*)\?=", re.DOTALL)
NO_DETAILS: dict[str, object] = {"mcp_method": None, "tool": None, "mcp_name": None, "arguments_sha256": None}


def _refused(
    rule: str, reason: str, status: int, code: int, ids: tuple[RequestId | None, ...] = (None,), *, batch: bool = False,
    messages: tuple[str, ...] = (), details: dict[str, object] | None = None,
) -> Decision:  # fmt: skip
    """A refusal answered with JSON-RPC errors: one per id (``messages`` each one's text, else ``reason``'s)."""
    text = clipped(f"refused by policy {rule}: {reason}")
    errors = [error_object(i, code, messages[n] if messages else text) for n, i in enumerate(ids)]
    answer = Answer(status, JSON, dumps(errors if batch else errors[0]))
    return Decision(False, rule, clipped(reason), Kind.MCP, answer, details=details or NO_DETAILS)


def check_mcp(
    section: McpOperations, rule: str, method: str, headers: Iterable[tuple[bytes, bytes]]
) -> Decision | McpBodyCheck:
    """The decision on a request's head to ``section``'s host, or the check of its body (a POST)."""
    named: dict[bytes, list[bytes]] = {}
    for name, value in headers:
        named.setdefault(name.lower(), []).append(value)
    if method == "GET":
        if b"last-event-id" in named:
            return _refused(rule, "a resumed event stream (Last-Event-ID) is refused", 400, INVALID_REQUEST)
        return allowed(rule, Kind.MCP, "GET: the server's event stream")
    if method == "DELETE":
        return allowed(rule, Kind.MCP, "DELETE: the end of an MCP session")
    if method != "POST":
        return _refused(rule, f"{method} is not MCP over streamable HTTP (POST, GET, DELETE)", 405, INVALID_REQUEST)
    types = named.get(b"content-type", [])
    media = types[0].partition(b";")[0].strip().lower() if len(types) == 1 else b""
    if media != JSON.encode():
        got = "none" if not types else ", ".join(t.decode("latin-1") for t in types)
        return _refused(rule, f"an MCP POST is {JSON} (Content-Type: {got})", 415, INVALID_REQUEST)
    codings = [c.strip().lower() for v in named.get(b"content-encoding", []) for c in v.split(b",")]
    if any(c and c != b"identity" for c in codings):
        return _refused(rule, "an MCP POST that is content-encoded cannot be checked", 415, INVALID_REQUEST)
    twice = next((h.decode() for h in ROUTING if len(named.get(h, [])) > 1), None)
    if twice is not None:
        return _refused(rule, f"{twice} is given twice", 400, INVALID_REQUEST)
    method_header, name_header = (named.get(h, [None])[0] for h in ROUTING[:2])
    return McpBodyCheck(section, rule, method_header, name_header)


def decode_header(value: bytes) -> str | None:
    """An ``Mcp-Name`` value as MCP's SDK writes it (``=?base64?...?=`` for what a header cannot hold); None when
    it cannot be read (a broken or non-canonical base64, not UTF-8)."""
    try:
        text = value.decode("ascii")
    except UnicodeDecodeError:
        return None
    sentinel = _SENTINEL.fullmatch(text)
    if sentinel is None:
        return text
    try:
        decoded = base64.b64decode(sentinel.group(1), validate=True)
        if base64.b64encode(decoded).decode("ascii") != sentinel.group(1):
            return None
        return decoded.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def arguments_digest(arguments: dict[str, Any]) -> str:
    """The SHA-256 of a call's arguments in canonical JSON (keys sorted, no spaces, UTF-8)."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _named(message: Message) -> str | None:
    key = NAMES.get(message.method or "")
    if key is None:
        return None
    value = message.params.get(key)
    if not isinstance(value, str):
        raise JsonRpcError(INVALID_REQUEST, f"{message.method} without a string {key}")
    return value


def _arguments(message: Message) -> dict[str, Any]:
    value = message.params.get("arguments")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise JsonRpcError(INVALID_REQUEST, "tools/call with arguments that are not a JSON object")
    return value


def _fields(message: Message) -> dict[str, object]:
    name = _named(message)
    call = message.method == "tools/call"
    return {
        "mcp_method": message.method,
        "tool": clipped(name, 128) if call and name is not None else None,
        "mcp_name": clipped(name) if name is not None else None,
        "arguments_sha256": arguments_digest(_arguments(message)) if call else None,
    }


def _batch(fields: list[dict[str, object]], decisions: list[str]) -> dict[str, object]:
    """A batch's record fields: each message's, with its decision."""
    calls = [{**f, "decision": d} for f, d in zip(fields, decisions, strict=True)]
    return {**NO_DETAILS, "mcp_method": "batch", "mcp_calls": calls}


class McpBodyCheck:
    """The ``BodyCheck`` of an MCP POST: the body held (to ``MAX_BODY``), then read and decided."""

    limit = MAX_BODY

    def __init__(self, section: McpOperations, rule: str, method: bytes | None, name: bytes | None) -> None:
        self.section = section
        self.rule = rule
        self.method_header = method
        self.name_header = name
        self._parts: list[bytes] = []
        self._size = 0

    def feed(self, data: bytes) -> Decision | None:
        self._size += len(data)
        if self._size > self.limit:
            reason = f"an MCP message larger than {self.limit} bytes cannot be checked"
            return _refused(self.rule, reason, 413, INVALID_REQUEST)
        self._parts.append(data)
        return None

    def end(self) -> Decision:
        try:
            document = strict_json(b"".join(self._parts))
        except JsonError as exc:
            return _refused(self.rule, f"not JSON-RPC: {exc}", 400, PARSE_ERROR)
        try:
            messages, batch = read_messages(document)
            fields = [_fields(message) for message in messages]
        except JsonRpcError as exc:
            return _refused(self.rule, exc.reason, 400, exc.code)
        try:
            self._agree(messages, batch)
            for message in messages:
                if message.method in NAMES and message.id is None:
                    raise JsonRpcError(INVALID_REQUEST, f"{message.method} as a notification (without an id)")
        except JsonRpcError as exc:
            details = _batch(fields, ["refused"] * len(fields)) if batch else fields[0]
            ids = (None,) if batch else (messages[0].id,)  # a batch's answer would be one error per request
            return _refused(self.rule, exc.reason, 400, exc.code, ids, details=details)
        refusals = [self._refusal(message) for message in messages]
        if not batch:
            if refusals[0] is not None:
                return _refused(self.rule, refusals[0], 200, REFUSED, (messages[0].id,), details=fields[0])
            return self._allowed(messages, fields[0], clipped(f"{messages[0].method or 'a response'}: passes"))
        if not any(refusals):
            details = _batch(fields, ["allowed"] * len(fields))
            return self._allowed(messages, details, f"a batch of {len(messages)} messages: each passes")
        details = _batch(fields, ["refused" if r else "not sent" for r in refusals])
        first = next(n for n, r in enumerate(refusals) if r is not None)
        reason = f"message {first + 1} of a batch of {len(messages)}: {refusals[first]}"
        requests = tuple(m.id for m in messages if m.request)
        texts = tuple(
            clipped(f"refused by policy {self.rule}: {r}")
            if r is not None
            else clipped(f"refused by policy {self.rule}: not sent, {reason}")
            for m, r in zip(messages, refusals, strict=True)
            if m.request
        )
        return _refused(self.rule, reason, 200, REFUSED, requests, batch=True, messages=texts, details=details)

    def _agree(self, messages: tuple[Message, ...], batch: bool) -> None:
        """``Mcp-Method`` and ``Mcp-Name``, when present, say what the body says (``JsonRpcError`` otherwise)."""
        if self.method_header is None and self.name_header is None:
            return
        if batch:
            raise JsonRpcError(INVALID_REQUEST, "Mcp-Method or Mcp-Name with a batch, which they cannot describe")
        message = messages[0]
        if self.method_header is not None and self.method_header.decode("latin-1") != message.method:
            raise JsonRpcError(INVALID_REQUEST, "the Mcp-Method header does not name the body's method")
        if self.name_header is not None:
            name = _named(message) if message.method in NAMES else None
            if name is None or decode_header(self.name_header) != name:
                raise JsonRpcError(INVALID_REQUEST, "the Mcp-Name header does not name what the body names")

    def _refusal(self, message: Message) -> str | None:
        section, method = self.section, message.method
        if method == "tools/call":
            name = _named(message)
            assert name is not None
            return section.tool_refusal(name, _arguments(message))
        if method in ("resources/read", "resources/subscribe"):
            uri = _named(message)
            assert uri is not None
            return section.resource_refusal(uri)
        if method == "prompts/get":
            name = _named(message)
            assert name is not None
            return section.prompts.refusal("prompt", name)
        return None

    def _allowed(self, messages: tuple[Message, ...], details: dict[str, object], reason: str) -> Decision:
        lists: dict[RequestId, str] = {
            m.id: m.method for m in messages if m.request and m.method in LISTS and m.id is not None
        }
        rewrite = list_answers(self.section, lists) if lists else None
        decision = allowed(self.rule, Kind.MCP, reason)
        return Decision(True, decision.rule, decision.reason, Kind.MCP, rewrite=rewrite, details=details)
