"""JSON-RPC 2.0 as MCP sends it, read strictly: one message or a batch, and the error answers the proxy gives.

The body is one strict JSON document (``broker.egress.operations.jsonbody``:
UTF-8, no key given twice, no ``NaN``), then each message is one of MCP's
shapes and nothing else: ``jsonrpc`` exactly ``"2.0"``; a request (``id``
and ``method``), a notification (``method``, no ``id``) with ``params`` an
object when present; a response (``id`` with ``result`` or ``error``). An
``id`` is a string or an integer (never null, a boolean or a fraction); no
other key is allowed, so the proxy and the server cannot read a message
differently. A batch is a list of 1 to ``MAX_BATCH`` messages whose
requests have distinct ids (an answer names the id it answers).

Errors the proxy answers itself are JSON-RPC error responses: ``-32700``
(not JSON), ``-32600`` (not a message MCP sends), and ``REFUSED``
(``-32001``) for a message the operations refuse, whose text MCP clients
show.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
REFUSED = -32001
MAX_BATCH = 32
MAX_ID = 256  # characters of a string id
_METHOD = re.compile(r"[!-~]{1,128}")  # printable ASCII, no space
RequestId = int | str


class JsonRpcError(ValueError):
    """A body that is not JSON-RPC as MCP sends it: the code to answer with and the reason (the body not echoed)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class Message:
    """One JSON-RPC message: a request (``id`` and ``method``), a notification (``method``) or a response."""

    id: RequestId | None
    method: str | None
    params: dict[str, Any]

    @property
    def request(self) -> bool:
        return self.id is not None and self.method is not None


def _id(value: object) -> RequestId:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise JsonRpcError(INVALID_REQUEST, "a JSON-RPC id is a string or an integer")
    if isinstance(value, str) and len(value) > MAX_ID:
        raise JsonRpcError(INVALID_REQUEST, f"a JSON-RPC id longer than {MAX_ID} characters")
    return value


def _message(value: object) -> Message:
    if not isinstance(value, dict):
        raise JsonRpcError(INVALID_REQUEST, "a JSON-RPC message is a JSON object")
    if value.get("jsonrpc") != "2.0":
        raise JsonRpcError(INVALID_REQUEST, 'a JSON-RPC message has "jsonrpc": "2.0"')
    if "method" in value:
        unknown = set(value) - {"jsonrpc", "id", "method", "params"}
        method = value["method"]
        if not isinstance(method, str) or not _METHOD.fullmatch(method):
            raise JsonRpcError(INVALID_REQUEST, "a JSON-RPC method is 1 to 128 printable ASCII characters")
        params = value.get("params", {})
        if not isinstance(params, dict):
            raise JsonRpcError(INVALID_REQUEST, f"{method}: params are a JSON object in MCP")
        identity = _id(value["id"]) if "id" in value else None
    else:
        outcome = [key for key in ("result", "error") if key in value]
        if "id" not in value or len(outcome) != 1:
            raise JsonRpcError(INVALID_REQUEST, "a JSON-RPC message is a request, a notification or a response")
        unknown = set(value) - {"jsonrpc", "id", *outcome}
        error = value.get("error")
        if outcome == ["error"] and not (
            isinstance(error, dict) and isinstance(error.get("code"), int) and isinstance(error.get("message"), str)
        ):
            raise JsonRpcError(INVALID_REQUEST, "a JSON-RPC error has an integer code and a message")
        identity, method, params = _id(value["id"]) if value["id"] is not None else None, None, {}
    if unknown:
        raise JsonRpcError(INVALID_REQUEST, f"a JSON-RPC message with a key it does not have ({min(unknown)[:32]})")
    return Message(identity, method, params)


def read_messages(document: object) -> tuple[tuple[Message, ...], bool]:
    """The messages of a parsed body and whether it is a batch, or ``JsonRpcError``."""
    if not isinstance(document, list):
        return (_message(document),), False
    if not document:
        raise JsonRpcError(INVALID_REQUEST, "an empty JSON-RPC batch")
    if len(document) > MAX_BATCH:
        raise JsonRpcError(INVALID_REQUEST, f"a JSON-RPC batch of more than {MAX_BATCH} messages")
    messages = tuple(_message(item) for item in document)
    ids = [m.id for m in messages if m.request]
    if len(set(map(repr, ids))) != len(ids):
        raise JsonRpcError(INVALID_REQUEST, "a JSON-RPC batch with two requests of one id")
    return messages, True


def error_object(identity: RequestId | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": identity, "error": {"code": code, "message": message}}


def dumps(document: object) -> bytes:
    """Compact JSON, UTF-8: what the proxy sends in an answer of its own or a rewritten one."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
