"""The value of one ``operations.mcp`` entry: what a session may do on one MCP server.

``tools``: names allowed and denied (``deny`` wins), and per tool the
arguments that must match a glob; ``resources``: the URIs ``resources/read``
(and ``resources/subscribe``) may name; ``prompts``: the prompts
``prompts/get`` may name. Everything a section does not allow is refused:
no tools, no resources, no prompts by default.

Two glob languages, both with ``*`` the only special character:

- names (tools, prompts, and the tool an ``arguments`` entry is for) are
  flat: ``*`` is any run of characters (``search_*``, ``*`` alone is every
  name). ``allow`` compares names as written (MCP names are case-sensitive);
  ``deny`` in any case, so a server that folds case is not reached around it;
- values (an argument's, a resource's URI) are ``/``-separated like refs and
  paths (``broker.egress.operations.segments``): ``*`` inside a segment never
  crosses a ``/``, a last segment ``*`` is one or more further segments
  (``agent/*`` matches ``agent/x`` and ``agent/x/y``), ``*`` alone is any
  value. A value compared with such a glob must be plain (``plain_value``):
  printable ASCII, no ``.`` or ``..`` segment, no backslash, no escaped
  ``.``, ``/``, ``\\`` or NUL, which a server could read as another value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from broker.egress.destinations import Destination
from broker.egress.operations.segments import SegmentGlob

ANY = "*"
MAX_NAME = 128  # MCP's own bound on a tool's or a prompt's name
_ESCAPES = ("%2e", "%2f", "%5c", "%00")


#: A name glob made ready to match: its first piece, its middle pieces and its last piece (no ``*``: the name).
Compiled = tuple[str, tuple[str, ...], str | None]


def compile_name(pattern: str) -> Compiled:
    first, *rest = pattern.split(ANY)
    if not rest:
        return first, (), None
    *middle, last = rest
    return first, tuple(middle), last


def matches_compiled(compiled: Compiled, name: str) -> bool:
    """Linear in the name's length: the first piece is a prefix, the last a suffix, each middle piece taken at its
    leftmost place after the one before (which leaves the most room for the rest, so nothing is lost)."""
    first, middle, last = compiled
    if last is None:
        return name == first
    if len(first) + len(last) > len(name) or not name.startswith(first) or not name.endswith(last):
        return False
    at, end = len(first), len(name) - len(last)
    for piece in middle:
        found = name.find(piece, at, end)
        if found < 0:
            return False
        at = found + len(piece)
    return True


@dataclass(frozen=True)
class NameSet:
    """Name globs made ready to match many names: exact names in a set, ``prefix*`` and ``*suffix`` each one
    ``startswith``/``endswith`` of them all, the rest one by one."""

    exact: frozenset[str]
    prefixes: tuple[str, ...]
    suffixes: tuple[str, ...]
    others: tuple[Compiled, ...]

    @classmethod
    def of(cls, patterns: tuple[str, ...]) -> NameSet:
        exact: set[str] = set()
        prefixes: list[str] = []
        suffixes: list[str] = []
        others: list[Compiled] = []
        for first, middle, last in map(compile_name, patterns):
            if last is None:
                exact.add(first)
            elif not middle and not last:
                prefixes.append(first)  # "prefix*" ("*" alone: the empty prefix)
            elif not middle and not first:
                suffixes.append(last)
            else:
                others.append((first, middle, last))
        return cls(frozenset(exact), tuple(prefixes), tuple(suffixes), tuple(others))

    def matches(self, name: str) -> bool:
        return (
            name in self.exact
            or (bool(self.prefixes) and name.startswith(self.prefixes))
            or (bool(self.suffixes) and name.endswith(self.suffixes))
            or any(matches_compiled(c, name) for c in self.others)
        )


def name_matches(pattern: str, name: str, *, any_case: bool = False) -> bool:
    """Whether the flat name glob ``pattern`` (``*`` any run, nothing else special) matches ``name``."""
    if any_case:
        pattern, name = pattern.lower(), name.lower()
    return matches_compiled(compile_name(pattern), name)


def plain_value(value: str) -> str | None:
    """Why ``value`` is not compared with a value glob (see the module docstring); None when it may be."""
    if any(not " " <= char <= "~" for char in value):
        return "a value outside printable ASCII"
    if "\\" in value:
        return "a value holding a backslash"
    lowered = value.lower()
    if any(escape in lowered for escape in _ESCAPES):
        return "a value holding an escaped ., /, \\ or NUL"
    if any(segment in (".", "..") for segment in value.split("/")):
        return "a value holding a . or .. segment"
    return None


def value_glob(text: str) -> SegmentGlob:
    """The value glob ``text`` (already checked for its characters): ``*`` alone matches any value."""
    if text == ANY:
        return SegmentGlob(text, (), anything=True, leading_slash=False)
    return SegmentGlob.of(text, leading_slash=False)


@dataclass(frozen=True)
class Names:
    """Names allowed and denied (flat globs); ``deny`` wins."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    _allow: NameSet = field(init=False, repr=False, compare=False)
    _deny: NameSet = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_allow", NameSet.of(self.allow))
        object.__setattr__(self, "_deny", NameSet.of(tuple(p.lower() for p in self.deny)))

    def allows(self, name: str) -> bool:
        """Whether ``name`` is allowed (what ``refusal`` decides, without its words: a list's entries)."""
        return len(name) <= MAX_NAME and not self._deny.matches(name.lower()) and self._allow.matches(name)

    def refusal(self, what: str, name: str) -> str | None:
        """Why ``name`` (a ``what``: tool, prompt) is refused, naming the rule's key; None when it is allowed."""
        if self.allows(name):
            return None
        if len(name) > MAX_NAME:
            return f"a {what} name longer than {MAX_NAME} characters"
        lowered = name.lower()
        denied = next((p for p in self.deny if matches_compiled(compile_name(p.lower()), lowered)), None)
        if denied is not None:
            return f"{what} {name} matches {what}s.deny {denied}"
        return f"{what} {name} is not in {what}s.allow"

    def to_json(self) -> dict[str, object]:
        return {"allow": list(self.allow), "deny": list(self.deny)}


@dataclass(frozen=True)
class ArgumentRule:
    """The arguments of the tools ``tool`` (a name glob) matches: each named argument a string its glob matches."""

    tool: str
    globs: tuple[tuple[str, SegmentGlob], ...]

    def to_json(self) -> dict[str, str]:
        return {name: str(glob) for name, glob in self.globs}


@dataclass(frozen=True)
class McpOperations:
    """One MCP server's (``host``) tools, argument rules, resource URIs and prompts."""

    host: Destination
    tools: Names = Names()
    arguments: tuple[ArgumentRule, ...] = ()
    resources: tuple[SegmentGlob, ...] = ()
    prompts: Names = Names()

    def applies(self, host: str, port: int) -> bool:
        return self.host.matches(host, port)

    def tool_refusal(self, name: str, arguments: Mapping[str, object]) -> str | None:
        """Why calling tool ``name`` with ``arguments`` is refused; None when it is allowed."""
        refused = self.tools.refusal("tool", name)
        if refused is not None:
            return refused
        for entry in self.arguments:
            if not name_matches(entry.tool, name):
                continue
            for argument, glob in entry.globs:
                where = f"tools.arguments.{entry.tool}.{argument} ({glob})"
                value = arguments.get(argument)
                if not isinstance(value, str):
                    got = "missing" if argument not in arguments else "not a string"
                    return f"tool {name}: argument {argument} is {got}, and {where} decides it"
                unread = None if glob.anything else plain_value(value)
                if unread is not None:
                    return f"tool {name}: argument {argument} is {unread}, which {where} cannot decide"
                if not glob.matches(value):
                    return f"tool {name}: argument {argument} {value} is outside {where}"
        return None

    def resource_refusal(self, uri: str) -> str | None:
        """Why reading the resource ``uri`` is refused; None when it is allowed."""
        unread = plain_value(uri)
        if unread is not None and not any(g.anything for g in self.resources):
            return f"resource URI {uri} is {unread}"
        if not any(glob.matches(uri) for glob in self.resources):
            return f"resource {uri} is not in resources"
        return None

    def to_json(self) -> dict[str, object]:
        return {
            "host": str(self.host),
            "tools": {**self.tools.to_json(), "arguments": {e.tool: e.to_json() for e in self.arguments}},
            "resources": [str(g) for g in self.resources],
            "prompts": self.prompts.to_json(),
        }
