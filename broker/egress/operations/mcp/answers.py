"""The answers to a POST's ``tools/list``, ``resources/list`` and ``prompts/list``: without what is not allowed.

The check (``broker.egress.operations.mcp.check``) hands the proxy a
``ListAnswers`` for a POST holding such requests; the proxy's relay sends the
answer through it (``AnswerRewrite``). A ``200`` answer is JSON (one
response, or a batch's list of them) or a ``text/event-stream``:

- JSON is held whole (at most ``MAX_HELD`` bytes), and a response to one of the
  POST's list requests goes back with the tools, resources or prompts the
  section does not allow taken out of its ``result`` (an entry without a
  string ``name``, or ``uri``, goes too); anything else passes as it came;
- an event stream is read event by event (the lines of the SSE format, each
  event at most ``MAX_HELD`` bytes): an event whose ``data`` is a response to
  one of them goes out with its data rewritten the same way, every other
  event as it came; once each list request is answered the rest streams
  through unread.

The rewritten body has no ``Content-Length`` of the upstream's (the proxy
frames it anew). An answer of another type, or one content-encoded, cannot
be read: ``AnswerRefused`` (the proxy answers 502). Answers other than
``200`` (errors, ``202``) pass as they are.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from broker.egress.operations.decision import AnswerRefused
from broker.egress.operations.mcp.jsonrpc import RequestId, dumps
from broker.egress.operations.mcp.model import McpOperations

MAX_HELD = 4 * 1024 * 1024
#: A list method, the key of its result's list, and the key of an entry's name.
LISTS = {"tools/list": ("tools", "name"), "resources/list": ("resources", "uri"), "prompts/list": ("prompts", "name")}


def _line_end(buffer: bytearray, at: int) -> int | None:
    """Where the first CR or LF at or after ``at`` is (memchr, not a regular expression); None when none is. A CR
    is looked for only before the LF: each line is searched once."""
    lf = buffer.find(b"\n", at)
    cr = buffer.find(b"\r", at, lf if lf >= 0 else len(buffer))
    if cr >= 0:
        return cr
    return lf if lf >= 0 else None


class Mode(Enum):
    THROUGH = "through"  # as it came
    JSON = "json"
    SSE = "sse"


def _key(identity: object) -> str:
    return repr(identity)  # 1 and "1" are two ids


class ListFilter:
    """The list requests of one POST by id, and what their answers keep."""

    def __init__(self, section: McpOperations, asked: dict[str, str]) -> None:
        self.section = section
        self.pending = dict(asked)  # the id's key -> the list method, until answered

    def allowed(self, method: str, entry: object) -> bool:
        key, name = LISTS[method][1], None
        if isinstance(entry, dict):
            name = entry.get(key)
        if not isinstance(name, str):
            return False
        if method == "resources/list":
            return self.section.resource_refusal(name) is None
        return (self.section.tools if method == "tools/list" else self.section.prompts).allows(name)

    def message(self, message: Any) -> Any | None:
        """``message`` with what is not allowed taken out, or None when it is not an answer to change."""
        if not isinstance(message, dict) or "id" not in message:
            return None
        method = self.pending.pop(_key(message["id"]), None)
        result = message.get("result")
        if method is None or not isinstance(result, dict) or not isinstance(result.get(LISTS[method][0]), list):
            return None
        listed = LISTS[method][0]
        kept = [entry for entry in result[listed] if self.allowed(method, entry)]
        if len(kept) == len(result[listed]):
            return None
        return {**message, "result": {**result, listed: kept}}

    def document(self, document: Any) -> Any | None:
        """A response or a batch of them, rewritten; None when nothing changed."""
        if not isinstance(document, list):
            return self.message(document)
        changed = [self.message(item) for item in document]
        if all(item is None for item in changed):
            return None
        return [new if new is not None else old for new, old in zip(changed, document, strict=True)]


def _media_type(headers: list[tuple[bytes, bytes]]) -> bytes:
    declared = [value for name, value in headers if name == b"content-type"]
    return declared[0].partition(b";")[0].strip().lower() if len(declared) == 1 else b""


class ListAnswers:
    """The ``AnswerRewrite`` of a POST's list requests (see the module docstring)."""

    def __init__(self, lists: ListFilter) -> None:
        self.lists = lists
        self.mode = Mode.THROUGH
        self._buffer = bytearray()
        self._event: list[bytes] = []  # the raw lines of the event being read
        self._data: list[bytes] = []
        self._size = 0
        self._scanned = 0  # how far the buffer was searched for a line's end

    def head(self, status: int, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        if status != 200:
            return headers
        if any(name == b"content-encoding" and value.strip().lower() != b"identity" for name, value in headers):
            raise AnswerRefused("an MCP answer that is content-encoded cannot be filtered")
        media = _media_type(headers)
        if media == b"application/json":
            self.mode = Mode.JSON
        elif media == b"text/event-stream":
            self.mode = Mode.SSE
        else:
            raise AnswerRefused("an MCP answer to a list that is neither JSON nor an event stream cannot be filtered")
        return [(name, value) for name, value in headers if name != b"content-length"]

    def feed(self, data: bytes) -> bytes:
        if self.mode is Mode.THROUGH:
            return data
        self._buffer += data
        out = self._events(final=False) if self.mode is Mode.SSE else b""
        if len(self._buffer) + self._size > MAX_HELD:
            raise AnswerRefused(f"an MCP answer (or one event of it) longer than {MAX_HELD} bytes cannot be filtered")
        return out

    def end(self) -> bytes:
        if self.mode is Mode.JSON:
            body = bytes(self._buffer)
            self._buffer.clear()
            try:
                changed = self.lists.document(json.loads(body))
            except (ValueError, RecursionError):
                return body  # not JSON: the client reads it as the upstream sent it (and fails as it would)
            return body if changed is None else dumps(changed)
        if self.mode is Mode.SSE:
            out = self._events(final=True)
            rest = b"".join(self._event) + bytes(self._buffer)  # an event the stream cut short
            self._event, self._buffer = [], bytearray()
            return out + rest
        return b""

    # -- the event stream ------------------------------------------------------------------------

    def _events(self, *, final: bool) -> bytes:
        out = bytearray()
        buffer = self._buffer
        start = 0
        while self.mode is Mode.SSE:
            end = _line_end(buffer, max(start, self._scanned))
            if end is None or (buffer[end] == 13 and end + 1 == len(buffer) and not final):
                self._scanned = len(buffer) if end is None else end  # a line not yet ended (a CR: maybe a CRLF)
                break
            after = end + 2 if buffer[end : end + 2] == b"\r\n" else end + 1
            line, raw = bytes(buffer[start:end]), bytes(buffer[start:after])
            start = after
            if line:
                self._line(line, raw)
                continue
            out += self._finished(raw)
            if not self.lists.pending:  # every list answered: the rest streams through unread
                self.mode = Mode.THROUGH
        del buffer[:start]
        self._scanned = max(0, self._scanned - start)
        if self.mode is Mode.THROUGH:
            out += buffer
            buffer.clear()
        return bytes(out)

    def _line(self, line: bytes, raw: bytes) -> None:
        self._event.append(raw)
        self._size += len(raw)
        name, _, value = line.partition(b":")
        if name == b"data":
            self._data.append(value[1:] if value.startswith(b" ") else value)

    def _finished(self, blank: bytes) -> bytes:
        event, data = self._event, self._data
        self._event, self._data, self._size = [], [], 0
        changed = None
        if data:
            try:
                changed = self.lists.document(json.loads(b"\n".join(data)))
            except (ValueError, RecursionError):
                changed = None
        if changed is None:
            return b"".join(event) + blank
        kept = [raw for raw in event if not (raw.startswith(b"data:") or raw.rstrip(b"\r\n") == b"data")]
        return b"".join(kept) + b"data: " + dumps(changed) + blank + blank


def list_answers(section: McpOperations, asked: dict[RequestId, str]) -> ListAnswers:
    """The rewrite of the answers to ``asked`` (each list request's id and method)."""
    return ListAnswers(ListFilter(section, {_key(identity): method for identity, method in asked.items()}))
