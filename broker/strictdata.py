"""Strict parsing of untrusted YAML and JSON documents.

YAML goes through PyYAML's safe loader, tightened further: no anchors or
aliases (no billion-laughs), no tags, no merge keys, no duplicate keys, a
bounded nesting depth. JSON refuses duplicate keys and NaN/Infinity. The
caller gives the size limit; the error names the line where YAML failed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import yaml
from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent
from yaml.nodes import MappingNode, Node

from broker.errors import BadInput

MAX_DEPTH = 32


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses the YAML features a manifest never needs."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        where = _where(event)
        if isinstance(event, AliasEvent):
            raise yaml.YAMLError(f"aliases are not allowed{where}")
        if isinstance(event, ScalarEvent | CollectionStartEvent):
            if event.anchor is not None:
                raise yaml.YAMLError(f"anchors are not allowed{where}")
            if event.tag is not None:
                raise yaml.YAMLError(f"tags are not allowed{where}")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.YAMLError(f"nesting deeper than {MAX_DEPTH} levels{where}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise yaml.YAMLError(f"merge keys (<<) are not allowed{_where(key_node)}")
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise yaml.YAMLError(f"keys must be strings{_where(key_node)}")
            if key in seen:
                raise yaml.YAMLError(f"duplicate key {key!r}{_where(key_node)}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _where(item: object) -> str:
    mark = getattr(item, "start_mark", None)
    return f" (line {mark.line + 1})" if mark is not None else ""


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed")


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_document(
    data: bytes,
    *,
    what: str,
    max_bytes: int,
    as_json: bool,
    error: type[BadInput] = BadInput,
) -> Any:
    """Parse ``data`` (YAML, or JSON when ``as_json``) into plain Python values."""
    if len(data) > max_bytes:
        raise error(f"{what} is larger than {max_bytes // 1024} KiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{what} is not valid UTF-8") from None
    if "\x00" in text:
        raise error(f"{what} contains a NUL character")
    loader: Callable[[str], Any] = _load_json if as_json else _load_yaml
    try:
        return loader(text)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        detail = _printable(" ".join(str(exc).split()))[:200]
        raise error(f"{what} is not valid {'JSON' if as_json else 'YAML'}: {detail}") from None


def _printable(text: str) -> str:
    """``text`` with every non-printable character escaped (YAML errors quote the offending line)."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _load_json(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_json_pairs, parse_constant=_reject_constant)


def _load_yaml(text: str) -> Any:
    loader = _StrictLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
