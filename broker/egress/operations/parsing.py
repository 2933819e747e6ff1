"""Reading a rule's or a manifest's ``operations`` mapping strictly, and checking its hosts against ``network``.

Every key is known or refused, every glob and route is checked (see ``refs``
and ``routes``), every host is parsed by ``broker.egress.destinations``; an
error is one line naming the key (``rules[0].operations.git.push[1]: ...``),
raised as the error class of the ``Fields`` the caller gives (a policy file's
or a manifest's). Defaults are the narrow ones: no pushes, no deletions, no
approvals, no GraphQL mutations, every path of an ``http`` host for its
methods.

A host is limited either by ``github_api`` or by ``http``, not both (two
answers for one request would be one too many); ``git`` may share a host with
either (git's smart-HTTP requests go to ``git``, the others to the other). An
``mcp`` host (``broker.egress.operations.mcp.parsing``) shares with no other
section.

``SECTIONS`` at the end is the same keys as the reference documents them
(``docs/reference.md``, at a rule's ``operations`` and at a manifest's); its
test checks them against the keys the real loaders read.
"""

from __future__ import annotations

import re

from broker.egress.destinations import Destination, DestinationError, parse_destination
from broker.egress.operations.mcp.model import McpOperations
from broker.egress.operations.mcp.parsing import KEYS as MCP_KEYS
from broker.egress.operations.mcp.parsing import read_mcp
from broker.egress.operations.model import (
    NO_OPERATIONS,
    GithubApiOperations,
    GitOperations,
    HttpOperations,
    Operations,
)
from broker.egress.operations.refs import RefError, parse_ref_glob
from broker.egress.operations.routes import RouteError, parse_method, parse_path_glob, parse_route
from broker.egress.operations.segments import SegmentGlob
from broker.vocab.fields import Fields, describe, shown

MAX_HOSTS = 200
MAX_PATTERNS = 200
GRAPHQL_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]{0,127}")


def read_operations(fields: Fields | None) -> Operations:
    """The ``operations`` mapping (``None``: the key is absent), or the ``Fields`` error naming the bad key."""
    if fields is None:
        return NO_OPERATIONS
    git = _read_git(fields.mapping("git", required=False))
    api = _read_api(fields.mapping("github_api", required=False))
    http = _read_http(fields.mapping("http", required=False))
    mcp = read_mcp(fields.mapping("mcp", required=False))
    fields.done()
    _refuse_overlaps(fields, api, http)
    _refuse_mcp_overlaps(fields, Operations(git=git, github_api=api, http=http), mcp)
    return Operations(git=git, github_api=api, http=http, mcp=mcp)


def overlap(one: Destination, other: Destination) -> bool:
    """Whether some host:port falls under both entries."""
    return one.covers(other) or other.covers(one)


def check_network(
    fields: Fields, operations: Operations, network: tuple[Destination, ...], network_key: str = "network"
) -> None:
    """Refuse (naming the key under ``fields``) an operations host that no entry of ``network`` covers."""
    named: list[tuple[str, Destination]] = []
    for section in operations.git:
        named.extend((f"operations.git.hosts[{i}]", h) for i, h in enumerate(section.hosts))
    for api in operations.github_api:
        named.extend((f"operations.github_api.hosts[{i}]", h) for i, h in enumerate(api.hosts))
    named.extend((f"operations.http.{entry.host}", entry.host) for entry in operations.http)
    named.extend((f"operations.mcp.{entry.host}", entry.host) for entry in operations.mcp)
    for key, host in named:
        if not any(entry.covers(host) for entry in network):
            raise fields.fail(key, f"{host} has no matching entry in {network_key}")


def _read_hosts(fields: Fields) -> tuple[Destination, ...]:
    value = fields.raw("hosts")
    if not isinstance(value, list) or not value:
        raise fields.fail("hosts", f"expected a list of at least one HOST:PORT, got {describe(value)}")
    if len(value) > MAX_HOSTS:
        raise fields.fail("hosts", f"has more than {MAX_HOSTS} items")
    hosts: list[Destination] = []
    for index, item in enumerate(value):
        hosts.append(_destination(fields, f"hosts[{index}]", item))
        if hosts[-1] in hosts[:-1]:
            raise fields.fail(f"hosts[{index}]", f"{hosts[-1]} is listed twice")
    return tuple(hosts)


def _destination(fields: Fields, key: str, item: object) -> Destination:
    try:
        return parse_destination(item)
    except DestinationError as exc:
        text = shown(item) if isinstance(item, str) else describe(item)
        raise fields.fail(key, f"{text}: {exc}") from None


def _patterns(fields: Fields, key: str) -> tuple[str, ...]:
    return fields.string_list(key, required=False, min_items=0, max_items=MAX_PATTERNS) or ()


def _read_git(fields: Fields | None) -> tuple[GitOperations, ...]:
    if fields is None:
        return ()
    hosts = _read_hosts(fields)
    push: list[SegmentGlob] = []
    for index, text in enumerate(_patterns(fields, "push")):
        try:
            push.append(parse_ref_glob(text))
        except RefError as exc:
            raise fields.fail(f"push[{index}]", f"{shown(text)}: {exc}") from None
    delete = fields.boolean("delete", False)
    fields.done()
    return (GitOperations(hosts, tuple(push), delete),)


def _read_api(fields: Fields | None) -> tuple[GithubApiOperations, ...]:
    if fields is None:
        return ()
    hosts = _read_hosts(fields)
    routes = {}
    for key in ("allow", "deny"):
        parsed = []
        for index, text in enumerate(_patterns(fields, key)):
            try:
                parsed.append(parse_route(text))
            except RouteError as exc:
                raise fields.fail(f"{key}[{index}]", f"{shown(text)}: {exc}") from None
        routes[key] = tuple(parsed)
    reviews = fields.mapping("reviews", required=False)
    approve = False
    if reviews is not None:
        approve = reviews.boolean("approve", False)
        reviews.done()
    mutations = fields.string_list(
        "graphql_mutations", required=False, min_items=0, max_items=MAX_PATTERNS, pattern=GRAPHQL_NAME,
        hint="a GraphQL field name such as createPullRequest",
    )  # fmt: skip
    fields.done()
    return (GithubApiOperations(hosts, routes["allow"], routes["deny"], approve, mutations or ()),)


def _read_http(fields: Fields | None) -> tuple[HttpOperations, ...]:
    if fields is None:
        return ()
    entries: list[HttpOperations] = []
    for key, _ in fields.items():
        if not isinstance(key, str):
            raise fields.fail(str(key), "expected a HOST:PORT key")
        host = _destination(fields, key, key)
        entry = fields.mapping(key)
        assert entry is not None
        methods = entry.string_list("methods", max_items=32, max_len=16)
        assert methods is not None
        for index, method in enumerate(methods):
            try:
                parse_method(method)
            except RouteError as exc:
                raise entry.fail(f"methods[{index}]", f"{shown(method)}: {exc}") from None
        paths: list[SegmentGlob] = []
        for index, text in enumerate(entry.string_list("paths", required=False, max_items=MAX_PATTERNS) or ("*",)):
            try:
                paths.append(parse_path_glob(text))
            except RouteError as exc:
                raise entry.fail(f"paths[{index}]", f"{shown(text)}: {exc}") from None
        entry.done()
        for other in entries:
            if overlap(other.host, host):
                raise fields.fail(key, f"overlaps {other.host}: name each host under one entry")
        entries.append(HttpOperations(host, methods, tuple(paths)))
    return tuple(entries)


def _refuse_overlaps(fields: Fields, api: tuple[GithubApiOperations, ...], http: tuple[HttpOperations, ...]) -> None:
    for entry in http:
        for section in api:
            clash = next((h for h in section.hosts if overlap(h, entry.host)), None)
            if clash is not None:
                raise fields.fail(
                    f"http.{entry.host}",
                    f"overlaps github_api host {clash}: a host is limited by github_api or by http, not both",
                )


def _refuse_mcp_overlaps(fields: Fields, others: Operations, mcp: tuple[McpOperations, ...]) -> None:
    for entry in mcp:
        clash = next((h for h in others.hosts() if overlap(h, entry.host)), None)
        if clash is not None:
            raise fields.fail(
                f"mcp.{entry.host}", f"overlaps {clash}, which another section limits: an MCP host has mcp alone"
            )


# -- the keys above as the reference documents them ----------------------------------------------

#: name, kind, required, description, default
KeyText = tuple[str, str, bool, str, str]

HOST = "HOST:PORT"
GLOB = "* is one segment; a last segment * is one or more further segments"
INTRO = (
    "Each host needs a matching network entry. The proxy terminates TLS for every operations host and checks each"
    " request before anything goes upstream; every request is an egress.request record. A manifest's operations"
    " narrow the rule's, never widen them (exit 3 names the key)."
)

#: (title suffix, path below ``operations``, keys, intro)
SECTIONS: tuple[tuple[str, str, tuple[KeyText, ...], str], ...] = (
    (
        "operations",
        "",
        (
            ("git", "table", False, "git smart HTTP on its hosts: fetches pass, pushes only to push refs.", ""),
            ("github_api", "table", False, "GitHub REST and GraphQL on its hosts: routes, approvals, mutations.", ""),
            ("http", "table", False, f"{HOST} -> methods and paths, for any other host.", ""),
            ("mcp", "table", False, f"{HOST} -> the tools, resources and prompts of an MCP server.", ""),
        ),
        INTRO,
    ),
    (
        "operations.git",
        ".git",
        (
            ("hosts", "list", True, f"{HOST} entries of the git hosts.", ""),
            ("push", "list", False, f"Ref globs a push may create or update (refs/heads/agent/*; {GLOB}).", "none"),
            ("delete", "boolean", False, "Whether a push may delete a ref.", "false"),
        ),
        "A push naming any ref outside push (or a deletion) is refused whole; git prints ng REF refused by policy.",
    ),
    (
        "operations.github_api",
        ".github_api",
        (
            ("hosts", "list", True, f"{HOST} entries of the API hosts.", ""),
            ("allow", "list", False, f"METHOD PATH routes allowed (GET *, POST /repos/*/*/pulls; {GLOB}).", "none"),
            ("deny", "list", False, "METHOD PATH routes refused even when allow matches.", "none"),
            ("reviews", "table", False, "approve: whether a review may APPROVE.", ""),
            ("graphql_mutations", "list", False, "GraphQL mutation names allowed; queries always pass.", "none"),
        ),
        "",
    ),
    (
        "operations.github_api.reviews",
        ".github_api.reviews",
        (("approve", "boolean", False, "Whether a review with event APPROVE passes (REST and GraphQL).", "false"),),
        "",
    ),
    (
        "operations.http",
        ".http",
        ((HOST, "table", False, "One host's methods and paths; a host is under github_api or http, not both.", ""),),
        "",
    ),
    (
        f"operations.http.{HOST}",
        f".http.{HOST}",
        (
            ("methods", "list", True, "Upper-case methods allowed (GET, HEAD).", ""),
            ("paths", "list", False, f"Path globs allowed ({GLOB}; * alone is every path).", "*"),
        ),
        "",
    ),
    *((f"operations{suffix}", suffix, keys, intro) for suffix, keys, intro in MCP_KEYS),
)
