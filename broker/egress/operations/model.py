"""The values of ``operations``: what a session may do on the hosts a rule (narrowed by a manifest) names.

Four kinds of section. ``git``: git smart HTTP on its hosts (fetches pass,
pushes only to refs under ``push``, deletions only with ``delete``).
``github_api``: REST routes (deny before allow) and GraphQL mutations.
``http``: one host's methods and path globs. ``mcp``: one MCP server's tools,
resources and prompts (``broker.egress.operations.mcp``).

A session's ``Operations`` holds tuples of sections; for a request the first
section of a kind whose hosts match is the one that applies (a manifest's
narrower sections come before the rule's, see ``narrowing``). A host named by
no section is not limited by operations (the network rules still hold).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.egress.destinations import Destination
from broker.egress.operations.mcp.model import McpOperations
from broker.egress.operations.routes import Route
from broker.egress.operations.segments import SegmentGlob

#: Review events GitHub takes; ``APPROVE`` is the one ``reviews: {approve: false}`` refuses.
APPROVE = "APPROVE"


def _matches(hosts: tuple[Destination, ...], host: str, port: int) -> bool:
    return any(entry.matches(host, port) for entry in hosts)


@dataclass(frozen=True)
class GitOperations:
    hosts: tuple[Destination, ...]
    push: tuple[SegmentGlob, ...] = ()
    delete: bool = False

    def applies(self, host: str, port: int) -> bool:
        return _matches(self.hosts, host, port)

    def to_json(self) -> dict[str, object]:
        return {"hosts": [str(h) for h in self.hosts], "push": [str(g) for g in self.push], "delete": self.delete}


@dataclass(frozen=True)
class GithubApiOperations:
    hosts: tuple[Destination, ...]
    allow: tuple[Route, ...] = ()
    deny: tuple[Route, ...] = ()
    approve: bool = False
    graphql_mutations: tuple[str, ...] = ()

    def applies(self, host: str, port: int) -> bool:
        return _matches(self.hosts, host, port)

    def to_json(self) -> dict[str, object]:
        return {
            "hosts": [str(h) for h in self.hosts],
            "allow": [str(r) for r in self.allow],
            "deny": [str(r) for r in self.deny],
            "reviews": {"approve": self.approve},
            "graphql_mutations": list(self.graphql_mutations),
        }


@dataclass(frozen=True)
class HttpOperations:
    host: Destination
    methods: tuple[str, ...]
    paths: tuple[SegmentGlob, ...]

    def applies(self, host: str, port: int) -> bool:
        return self.host.matches(host, port)

    def to_json(self) -> dict[str, object]:
        return {"host": str(self.host), "methods": list(self.methods), "paths": [str(p) for p in self.paths]}


@dataclass(frozen=True)
class Operations:
    git: tuple[GitOperations, ...] = ()
    github_api: tuple[GithubApiOperations, ...] = ()
    http: tuple[HttpOperations, ...] = ()
    mcp: tuple[McpOperations, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.git or self.github_api or self.http or self.mcp)

    def hosts(self) -> tuple[Destination, ...]:
        """Every host any section names (the hosts whose TLS the proxy terminates), each once, in order."""
        seen: list[Destination] = []
        for hosts in (*(s.hosts for s in self.git), *(s.hosts for s in self.github_api)):
            seen.extend(h for h in hosts if h not in seen)
        single: list[Destination] = [e.host for e in self.http] + [e.host for e in self.mcp]
        seen.extend(h for h in dict.fromkeys(single) if h not in seen)
        return tuple(seen)

    def limits(self, host: str, port: int) -> bool:
        """Whether any section names ``host``:``port``."""
        sections: tuple[GitOperations | GithubApiOperations | HttpOperations | McpOperations, ...] = (
            *self.git,
            *self.github_api,
            *self.http,
            *self.mcp,
        )
        return any(s.applies(host, port) for s in sections)

    def to_json(self) -> dict[str, object]:
        """What ``policy check --task`` shows: the sections in the order they apply."""
        return {
            "git": [s.to_json() for s in self.git],
            "github_api": [s.to_json() for s in self.github_api],
            "http": [e.to_json() for e in self.http],
            "mcp": [e.to_json() for e in self.mcp],
        }


NO_OPERATIONS = Operations()
