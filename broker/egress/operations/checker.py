"""One session's operations at work: which hosts they limit, and the decision on each request's head.

The proxy builds one ``OperationsChecker`` per session (from the effective
operations and the rule's id) and, for every request to a host it limits,
calls ``check`` with what h11 gives it (method, target, headers). The answer
is a ``Decision`` or, when the body decides, a ``BodyCheck`` to feed the body
to (a push's command list, a GraphQL document, a review). For the host the
first section of each kind that names it applies: a smart-HTTP request to a
``git`` host goes to ``git``; any other request to ``github_api`` or
``http``; a request no section takes is refused. An ``mcp`` host has no other
section: its requests go to ``broker.egress.operations.mcp.check``.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.egress.operations.decision import BodyCheck, Decision, Kind, allowed, refused_github, refused_text
from broker.egress.operations.git import GitRequest, check_git, classify
from broker.egress.operations.github import check_api
from broker.egress.operations.mcp.check import check_mcp
from broker.egress.operations.model import HttpOperations, Operations
from broker.egress.operations.routes import METHOD, RouteError, query_of, request_paths


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode("latin-1")


def _encoding(headers: Iterable[tuple[bytes | str, bytes | str]]) -> str:
    """The content codings other than identity, comma-joined."""
    codings: list[str] = []
    for raw_name, raw_value in headers:
        if _text(raw_name).lower() == "content-encoding":
            codings.extend(c.strip().lower() for c in _text(raw_value).split(","))
    return ",".join(c for c in codings if c and c != "identity")


class OperationsChecker:
    """The effective operations of one session under ``rule``, deciding request by request."""

    def __init__(self, operations: Operations, rule: str) -> None:
        self.operations = operations
        self.rule = rule

    def limits(self, host: str, port: int) -> bool:
        """Whether operations limit ``host`` (canonical) and ``port``: the proxy terminates TLS for it."""
        return self.operations.limits(host, port)

    def check(
        self,
        host: str,
        port: int,
        method: bytes | str,
        target: bytes | str,
        headers: Iterable[tuple[bytes | str, bytes | str]] = (),
    ) -> Decision | BodyCheck:
        """The decision on a request's head, or the ``BodyCheck`` that decides on its body."""
        rule = self.rule
        mcp = next((s for s in self.operations.mcp if s.applies(host, port)), None)
        if mcp is not None:
            return check_mcp(mcp, rule, _text(method), ((_bytes(k), _bytes(v)) for k, v in headers))
        git = next((s for s in self.operations.git if s.applies(host, port)), None)
        api = next((s for s in self.operations.github_api if s.applies(host, port)), None)
        http = next((s for s in self.operations.http if s.applies(host, port)), None)
        if git is None and api is None and http is None:
            return allowed(rule, Kind.NONE, "no operations limit this host")

        def refuse(reason: str) -> Decision:
            if api is not None:
                return refused_github(rule, reason)
            return refused_text(rule, Kind.HTTP if http is not None else Kind.GIT, reason)

        verb, text = _text(method), _text(target)
        if not METHOD.fullmatch(verb):
            return refuse("a method that is not an upper-case token")
        try:
            paths = request_paths(text)
        except RouteError as exc:
            return refuse(str(exc))
        query = query_of(text)
        encoding = _encoding(headers)
        if git is not None:
            kind = classify(verb, paths, query)
            if kind is not GitRequest.OTHER:
                return check_git(git, rule, kind, verb, encoding)
        if api is not None:
            return check_api(api, rule, verb, paths, query, encoding)
        if http is not None:
            return _check_http(http, rule, verb, paths)
        return refused_text(rule, Kind.GIT, f"{verb} {paths[0]} is not git smart HTTP")


def _check_http(entry: HttpOperations, rule: str, method: str, paths: tuple[str, ...]) -> Decision:
    if method not in entry.methods:
        return refused_text(rule, Kind.HTTP, f"{method} is not among the methods for {entry.host}")
    for path in paths:
        if not any(glob.matches(path) for glob in entry.paths):
            return refused_text(rule, Kind.HTTP, f"{method} {path} is not among the paths for {entry.host}")
    return allowed(rule, Kind.HTTP, f"{method} {paths[0]} on {entry.host}")
