"""Strict parsing of untrusted YAML and JSON documents.

YAML goes through PyYAML's safe loader, tightened further: no anchors or
aliases (no billion-laughs), no tags, no merge keys, no duplicate keys, a
bounded nesting depth. JSON refuses duplicate keys and NaN/Infinity. The
caller gives the size limit.

A task file is read here too (``read_task_file``): the daemon's thin client
reads and parses the manifest with its caller's rights and sends it as JSON,
and needs this module, not the config or the provider vocabulary that
``broker.core.inputs.manifest`` checks a manifest against.

Errors name the document and the line, never a line of its content: the
file may be anything the broker can read (a credentials file given as a
manifest), so the parsers' own messages, which quote the offending line or
text, are reduced to their problem with every quoted fragment longer than
one character elided.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.error import Mark
from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent
from yaml.nodes import MappingNode, Node
from yaml.reader import ReaderError

from broker.vocab.errors import BadInput, ManifestError
from broker.vocab.fields import shown
from broker.vocab.files import read_regular_file, shown_path

MAX_DEPTH = 32
MAX_MANIFEST_BYTES = 64 * 1024
NEWLINE, NUL = "\n", "\x00"


class _Refused(yaml.YAMLError):
    """A refusal worded by the broker itself (safe to show as is), at a line of the document."""

    def __init__(self, message: str, mark: Mark | None) -> None:
        super().__init__(message)
        self.message = message
        self.line = mark.line + 1 if mark is not None else None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses the YAML features a manifest never needs."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        mark = event.start_mark
        if isinstance(event, AliasEvent):
            raise _Refused("aliases are not allowed", mark)
        if isinstance(event, ScalarEvent | CollectionStartEvent):
            if event.anchor is not None:
                raise _Refused("anchors are not allowed", mark)
            if event.tag is not None:
                raise _Refused("tags are not allowed", mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nesting deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except ValueError as exc:  # an integer of thousands of digits, a date that does not exist
            raise _Refused(f"a value that cannot be read ({elided(str(exc))})", node.start_mark) from None

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise _Refused("merge keys (<<) are not allowed", key_node.start_mark)
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise _Refused("keys must be strings", key_node.start_mark)
            if key in seen:
                raise _Refused(f"duplicate key {shown(key)}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _reject_constant(name: str) -> float:
    raise _JsonRefused(f"{name} is not allowed")


class _JsonRefused(ValueError):
    """A refusal worded by the broker itself (safe to show as is)."""


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _JsonRefused(f"duplicate key {shown(key)}")
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
    except UnicodeDecodeError as exc:
        raise error(f"{what} is not valid UTF-8 (line {data.count(NEWLINE.encode(), 0, exc.start) + 1})") from None
    if "\x00" in text:
        raise error(f"{what} contains a NUL character (line {text.count(NEWLINE, 0, text.index(NUL)) + 1})")
    if as_json:
        return _load_json(text, what, error)
    return _load_yaml(text, what, error)


#: A quoted fragment in a parser's message: kept when it stands for one character or a token kind.
_QUOTED = re.compile(r"'(?:[^'\\\n]|\\.)*'" + r'|"(?:[^"\\\n]|\\.)*"')
_HARMLESS = re.compile(r"""(['"])(?:[^\\]|\\[^xuU]|\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\U[0-9a-f]{8}|<[a-z ]{1,20}>)\1""")


def elided(text: str) -> str:
    """A parser's problem text without any content it quotes (one character or a token kind stays)."""
    flat = " ".join(text.split())
    kept = _QUOTED.sub(lambda m: m.group(0) if _HARMLESS.fullmatch(m.group(0)) else "'...'", flat)
    return _printable(kept)[:160]


def _printable(text: str) -> str:
    """``text`` with every non-printable character escaped."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _invalid(what: str, kind: str, line: int | None, problem: str, error: type[BadInput]) -> BadInput:
    at = f" at line {line}" if line is not None else ""
    return error(f"{what} is not valid {kind}{at}: {problem}")


def _load_json(text: str, what: str, error: type[BadInput]) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_json_pairs, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise _invalid(what, "JSON", exc.lineno, elided(exc.msg), error) from None
    except _JsonRefused as exc:
        raise _invalid(what, "JSON", None, str(exc), error) from None
    except (ValueError, RecursionError) as exc:  # our hooks, an integer of thousands of digits, deep nesting
        raise _invalid(what, "JSON", None, elided(str(exc)), error) from None


def _load_yaml(text: str, what: str, error: type[BadInput]) -> Any:
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text)  # the reader checks the first characters here already
        return loader.get_single_data()
    except _Refused as exc:
        raise _invalid(what, "YAML", exc.line, exc.message, error) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = ", ".join(part for part in (exc.context, exc.problem) if part) or "malformed"
        raise _invalid(what, "YAML", line, elided(problem), error) from None
    except ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise _invalid(what, "YAML", line, "a control or special character YAML does not allow", error) from None
    except (yaml.YAMLError, RecursionError):
        raise _invalid(what, "YAML", None, "malformed", error) from None
    finally:
        if loader is not None:
            loader.dispose()


@dataclass(frozen=True)
class TaskFile:
    """A task file's bytes, whether to parse them as JSON, and the name its errors use."""

    data: bytes
    as_json: bool
    what: str

    def document(self) -> Any:
        """The manifest's document, strictly parsed (its size checked too)."""
        return parse_document(
            self.data, what=self.what, max_bytes=MAX_MANIFEST_BYTES, as_json=self.as_json, error=ManifestError
        )


def read_task_file(source: str) -> TaskFile:
    """The manifest's bytes (``-`` reads stdin).

    A file must be a regular file (a symbolic link to one is followed: its
    content is never echoed); a FIFO, a device or a directory is refused
    without reading it.
    """
    if source == "-":
        return TaskFile(sys.stdin.buffer.read(MAX_MANIFEST_BYTES + 1), False, "manifest")
    data, _ = read_regular_file(source, what="task file", max_bytes=MAX_MANIFEST_BYTES, error=ManifestError)
    return TaskFile(data, Path(source).suffix.lower() == ".json", f"task file {shown_path(source)}")
