"""A JSON request body held (up to a bound) and read strictly, for the checks that depend on what it says.

Strict because the broker and the upstream must read the same document: UTF-8
only, no duplicate keys (``{"event": "COMMENT", "event": "APPROVE"}`` means
different things to different parsers), no ``NaN`` or ``Infinity``, nesting
bounded by the size limit and Python's recursion guard.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from broker.egress.operations.decision import Decision

#: The largest JSON body the broker holds to decide (a GraphQL document or a review is far smaller).
MAX_JSON_BODY = 1024 * 1024


class JsonError(ValueError):
    """A body that is not one strict JSON document; the message says why (the body is not echoed)."""


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise JsonError("a JSON object with a key given twice")
        result[key] = value
    return result


def _no_constant(name: str) -> object:
    raise JsonError(f"a JSON number {name}")


def strict_json(data: bytes) -> object:
    """The document in ``data``, or ``JsonError``."""
    try:
        text = data.decode("utf-8")
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise JsonError("a body that is not UTF-8") from None
    except RecursionError:
        raise JsonError("JSON nested too deeply") from None
    except ValueError as exc:  # json.JSONDecodeError, and JsonError itself
        if isinstance(exc, JsonError):
            raise
        raise JsonError("a body that is not JSON") from None


class JsonBodyCheck:
    """The ``BodyCheck`` of a JSON body: held whole (to ``limit``), then ``decide`` on the document."""

    def __init__(
        self,
        decide: Callable[[object], Decision],
        refuse: Callable[[str], Decision],
        limit: int = MAX_JSON_BODY,
    ) -> None:
        self.limit = limit
        self._decide = decide
        self._refuse = refuse
        self._parts: list[bytes] = []
        self._size = 0

    def feed(self, data: bytes) -> Decision | None:
        self._size += len(data)
        if self._size > self.limit:
            return self._refuse(f"a body larger than {self.limit} bytes cannot be checked")
        self._parts.append(data)
        return None

    def end(self) -> Decision:
        try:
            document = strict_json(b"".join(self._parts))
        except JsonError as exc:
            return self._refuse(str(exc))
        return self._decide(document)
