"""Reading ``operations.mcp`` strictly: ``HOST:PORT`` keys, each with its tools, resources and prompts.

Every key is known or refused and every pattern checked; an error is one line
naming the key (``rules[0].operations.mcp.mcp.example.com:443.tools.allow[1]:
...``), raised as the error class of the ``Fields`` the caller gives. The
defaults are the narrow ones: no tool, no resource, no prompt. ``prompts`` is
``true`` (every prompt), ``false`` or ``{allow, deny}``.

``KEYS`` at the end is what ``docs/reference.md`` shows under
``operations.mcp`` (``broker.egress.operations.parsing.SECTIONS`` takes it).
"""

from __future__ import annotations

import re

from broker.egress.destinations import Destination, DestinationError, parse_destination
from broker.egress.operations.mcp.model import ANY, ArgumentRule, McpOperations, Names, value_glob
from broker.egress.operations.segments import SegmentGlob
from broker.vocab.fields import Fields, describe, shown

MAX_PATTERNS = 200
MAX_ARGUMENTS = 32
NAME_GLOB = re.compile(r"[A-Za-z0-9_.:/\-*]{1,128}")
ARGUMENT = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_VALUE_GLOB = re.compile(r"[!-~]{1,256}")  # printable ASCII, no space
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
NAME_HINT = "letters, digits, _ . : / - and * (any run of characters)"


class GlobError(ValueError):
    """A malformed value glob; the message says why."""


def parse_value_glob(text: str, *, uri: bool) -> SegmentGlob:
    """An argument's (``uri``: a resource's) value glob, or ``GlobError``."""
    if text == ANY:
        return value_glob(text)
    if not _VALUE_GLOB.fullmatch(text):
        raise GlobError("a glob is 1 to 256 printable ASCII characters without spaces")
    if "\\" in text or "%" in text:
        raise GlobError("a glob holds no backslash and no % escape")
    segments = text.split("/")
    for index, segment in enumerate(segments):
        if "**" in segment:
            raise GlobError("** is not a pattern here: a last segment * matches the rest")
        if segment in (".", ".."):
            raise GlobError("a glob has no . or .. segment")
        if not segment and not (uri and index == 1 and _SCHEME.fullmatch(segments[0]) and len(segments) > 2):
            raise GlobError("a glob has no empty segment (//), but for a URI's scheme://")
    return value_glob(text)


def read_mcp(fields: Fields | None) -> tuple[McpOperations, ...]:
    """``operations.mcp``: one ``McpOperations`` per ``HOST:PORT`` key, in order."""
    if fields is None:
        return ()
    entries: list[McpOperations] = []
    for key, _ in fields.items():
        if not isinstance(key, str):
            raise fields.fail(str(key), "expected a HOST:PORT key")
        host = _host(fields, key)
        entry = fields.mapping(key)
        assert entry is not None
        tools = entry.mapping("tools", required=False)
        names, arguments = _read_tools(tools) if tools is not None else (Names(), ())
        resources = tuple(
            _value(entry, f"resources[{i}]", text, uri=True) for i, text in enumerate(_patterns(entry, "resources"))
        )
        prompts = _read_prompts(entry)
        entry.done()
        for other in entries:
            if other.host.covers(host) or host.covers(other.host):
                raise fields.fail(key, f"overlaps {other.host}: name each host under one entry")
        entries.append(McpOperations(host, names, arguments, resources, prompts))
    return tuple(entries)


def _host(fields: Fields, key: str) -> Destination:
    try:
        return parse_destination(key)
    except DestinationError as exc:
        raise fields.fail(key, f"{shown(key)}: {exc}") from None


def _patterns(fields: Fields, key: str, pattern: re.Pattern[str] | None = None) -> tuple[str, ...]:
    hint = NAME_HINT if pattern is not None else ""
    return (
        fields.string_list(key, required=False, min_items=0, max_items=MAX_PATTERNS, pattern=pattern, hint=hint) or ()
    )


def _names(fields: Fields) -> Names:
    names = Names(_patterns(fields, "allow", NAME_GLOB), _patterns(fields, "deny", NAME_GLOB))
    fields.done()
    return names


def _value(fields: Fields, key: str, text: str, *, uri: bool) -> SegmentGlob:
    try:
        return parse_value_glob(text, uri=uri)
    except GlobError as exc:
        raise fields.fail(key, f"{shown(text)}: {exc}") from None


def _read_tools(tools: Fields) -> tuple[Names, tuple[ArgumentRule, ...]]:
    allow, deny = _patterns(tools, "allow", NAME_GLOB), _patterns(tools, "deny", NAME_GLOB)
    arguments = tools.mapping("arguments", required=False)
    rules: list[ArgumentRule] = []
    if arguments is not None:
        for tool, _ in arguments.items():
            if not isinstance(tool, str) or not NAME_GLOB.fullmatch(tool):
                raise arguments.fail(str(tool), f"a tool name or name glob ({NAME_HINT})")
            rules.append(ArgumentRule(tool, _read_argument_globs(arguments, tool)))
    tools.done()
    return Names(allow, deny), tuple(rules)


def _read_argument_globs(arguments: Fields, tool: str) -> tuple[tuple[str, SegmentGlob], ...]:
    entry = arguments.mapping(tool)
    assert entry is not None
    globs: list[tuple[str, SegmentGlob]] = []
    items = entry.items()
    if not items:
        raise arguments.fail(tool, "names no argument (leave the tool out instead)")
    if len(items) > MAX_ARGUMENTS:
        raise arguments.fail(tool, f"has more than {MAX_ARGUMENTS} arguments")
    for name, text in items:
        if not isinstance(name, str) or not ARGUMENT.fullmatch(name):
            raise entry.fail(str(name), "an argument name is 1 to 64 letters, digits, _ . or -")
        if not isinstance(text, str):
            raise entry.fail(name, f"expected a glob string, got {describe(text)}")
        globs.append((name, _value(entry, name, text, uri=False)))
    return tuple(globs)


def _read_prompts(entry: Fields) -> Names:
    value = entry.raw("prompts")
    if value is None or value is False:
        return Names()
    if value is True:
        return Names((ANY,))
    if not isinstance(value, dict):
        raise entry.fail("prompts", f"expected true, false or {{allow, deny}}, got {describe(value)}")
    prompts = entry.mapping("prompts")
    assert prompts is not None
    return _names(prompts)


# -- the keys above as the reference documents them ----------------------------------------------

NAME = "flat globs, * any run of characters"
VALUE = "segment globs as refs and paths: * in a segment, a last segment * the rest, * alone any value"
#: (title suffix below ``operations``, keys as ``parsing.KeyText``, intro)
KEYS: tuple[tuple[str, tuple[tuple[str, str, bool, str, str], ...], str], ...] = (
    (
        ".mcp",
        (("HOST:PORT", "table", False, "One MCP server's tools, resources and prompts (streamable HTTP).", ""),),
        "Each JSON-RPC message is read before it goes upstream: a refused tools/call, resources/read or prompts/get"
        " is answered by the proxy (JSON-RPC error -32001 naming the rule); tools/list, resources/list and"
        " prompts/list answers lose what is not allowed; Mcp-Method and Mcp-Name must agree with the body.",
    ),
    (
        ".mcp.HOST:PORT",
        (
            ("tools", "table", False, "allow, deny and arguments of the tools.", ""),
            ("resources", "list", False, f"URI globs resources/read may name ({VALUE}).", "none"),
            ("prompts", "boolean or table", False, "true, false, or {allow, deny} of prompt names.", "false"),
        ),
        "",
    ),
    (
        ".mcp.HOST:PORT.tools",
        (
            ("allow", "list", False, f"Tool names allowed ({NAME}; compared as written).", "none"),
            ("deny", "list", False, "Tool names refused even when allow matches (compared in any case).", "none"),
            ("arguments", "table", False, f"TOOL -> {{ARGUMENT: GLOB}}: each a string the glob matches ({VALUE}).", ""),
        ),
        "A call whose tool has an arguments entry must give each named argument as a string its glob matches.",
    ),
    (
        ".mcp.HOST:PORT.prompts",
        (
            ("allow", "list", False, f"Prompt names allowed ({NAME}).", "none"),
            ("deny", "list", False, "Prompt names refused even when allow matches.", "none"),
        ),
        "",
    ),
)
