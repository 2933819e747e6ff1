"""A manifest's ``operations`` narrowing its rule's, never widening them: the effective operations, or a denial.

The manifest's top-level ``operations`` has the rule's shape and is read by
the same parser (so its defaults are the narrow ones too). For each host a
manifest section names:

- a host the rule's operations do not limit at all may be limited in any way
  (anything is narrower than no limit; ``network`` still has to allow it);
- a host the rule limits must be covered by a host of the rule's section of
  the same kind (a manifest cannot put ``http`` on a host the rule gives to
  ``github_api``, nor ``git`` where the rule has none), and the manifest's
  limits must lie within that section's: every ``push`` glob within one of the
  rule's (containment of globs: every ref one matches, the other matches,
  ``segments.SegmentGlob.within``), ``delete`` and ``reviews.approve`` not
  true where the rule's are false, every ``allow`` route within one of the
  rule's, every GraphQL mutation listed by the rule, every ``http`` method and
  path among the rule's, every ``mcp`` tool, prompt and resource glob within
  the rule's (``broker.egress.operations.mcp.narrowing``). The rule's ``deny``
  routes always stay: they are added to the manifest's (and an ``mcp``
  entry's ``deny`` globs and ``arguments`` rules likewise).

The effective operations are the manifest's sections first, then the rule's
(the first section of a kind naming a host applies), so a host the manifest
does not name keeps the rule's limits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from broker.egress.destinations import Destination
from broker.egress.operations.mcp.model import McpOperations
from broker.egress.operations.mcp.narrowing import narrow_mcp
from broker.egress.operations.model import NO_OPERATIONS, GithubApiOperations, GitOperations, HttpOperations, Operations
from broker.egress.operations.parsing import overlap
from broker.vocab.errors import PolicyDenied

Section = GitOperations | GithubApiOperations | HttpOperations | McpOperations


def _hosts(section: Section) -> tuple[Destination, ...]:
    return (section.host,) if isinstance(section, HttpOperations | McpOperations) else section.hosts


def _listed(items: Sequence[object]) -> str:
    return ", ".join(str(i) for i in items) or "none"


class _Narrowing:
    def __init__(self, granted: Operations) -> None:
        self.granted = granted
        self.problems: list[str] = []
        sections: list[Section] = [*granted.git, *granted.github_api, *granted.http, *granted.mcp]
        self.limited = [host for section in sections for host in _hosts(section)]

    def targets(self, key: str, kind: str, hosts: Sequence[Destination], sections: Sequence[Section]) -> list[Section]:
        """The rule's sections of this kind the manifest's ``hosts`` fall under (problems for hosts they cannot)."""
        found: list[Section] = []
        for index, host in enumerate(hosts):
            if not any(overlap(limited, host) for limited in self.limited):
                continue
            section = next((s for s in sections if any(h.covers(host) for h in _hosts(s))), None)
            where = f"{key}.hosts[{index}]" if kind not in ("http", "mcp") else key
            if section is None:
                self.problems.append(f"{where}: the rule limits {host} and not with {kind} there")
            elif section not in found:
                found.append(section)
        return found

    def git(self, asked: GitOperations) -> GitOperations:
        for rule in self.targets("operations.git", "git", asked.hosts, self.granted.git):
            assert isinstance(rule, GitOperations)
            for index, glob in enumerate(asked.push):
                if not any(glob.within(mine) for mine in rule.push):
                    self.problems.append(
                        f"operations.git.push[{index}]: {glob} is not within the rule's push ({_listed(rule.push)})"
                    )
            if asked.delete and not rule.delete:
                self.problems.append("operations.git.delete: true where the rule's is false")
        return asked

    def api(self, asked: GithubApiOperations) -> GithubApiOperations:
        deny = list(asked.deny)
        for rule in self.targets("operations.github_api", "github_api", asked.hosts, self.granted.github_api):
            assert isinstance(rule, GithubApiOperations)
            for index, route in enumerate(asked.allow):
                if not any(route.within(mine) for mine in rule.allow):
                    self.problems.append(
                        f"operations.github_api.allow[{index}]: {route} is not within the rule's allow "
                        f"({_listed(rule.allow)})"
                    )
            if asked.approve and not rule.approve:
                self.problems.append("operations.github_api.reviews.approve: true where the rule's is false")
            for index, name in enumerate(asked.graphql_mutations):
                if name not in rule.graphql_mutations:
                    self.problems.append(
                        f"operations.github_api.graphql_mutations[{index}]: {name} is not among the rule's "
                        f"({_listed(rule.graphql_mutations)})"
                    )
            deny.extend(route for route in rule.deny if route not in deny)
        return replace(asked, deny=tuple(deny))

    def http(self, asked: HttpOperations) -> HttpOperations:
        key = f"operations.http.{asked.host}"
        for rule in self.targets(key, "http", (asked.host,), self.granted.http):
            assert isinstance(rule, HttpOperations)
            for index, method in enumerate(asked.methods):
                if method not in rule.methods:
                    self.problems.append(f"{key}.methods[{index}]: {method} is not among the rule's methods")
            for index, glob in enumerate(asked.paths):
                if not any(glob.within(mine) for mine in rule.paths):
                    self.problems.append(
                        f"{key}.paths[{index}]: {glob} is not within the rule's paths ({_listed(rule.paths)})"
                    )
        return asked

    def mcp(self, asked: McpOperations) -> McpOperations:
        """The manifest's entry with its rule's limits added (``broker.egress.operations.mcp.narrowing``)."""
        for rule in self.targets(f"operations.mcp.{asked.host}", "mcp", (asked.host,), self.granted.mcp):
            assert isinstance(rule, McpOperations)
            asked = narrow_mcp(asked, rule, self.problems)
        return asked


def narrow(rule: str, granted: Operations, asked: Operations) -> Operations:
    """The effective operations of ``asked`` (a manifest's) under ``granted`` (its rule's), or ``PolicyDenied``."""
    if asked.empty:
        return granted
    narrowing = _Narrowing(granted)
    git = tuple(narrowing.git(section) for section in asked.git)
    api = tuple(narrowing.api(section) for section in asked.github_api)
    http = tuple(narrowing.http(entry) for entry in asked.http)
    mcp = tuple(narrowing.mcp(entry) for entry in asked.mcp)
    if narrowing.problems:
        problems = tuple(narrowing.problems)
        raise PolicyDenied(f"the manifest's operations widen rule {rule}: {problems[0]}", problems)
    return Operations(
        git=git + granted.git,
        github_api=api + granted.github_api,
        http=http + granted.http,
        mcp=mcp + granted.mcp,
    )


def narrowed(rule: str, granted: Operations, asked: Operations) -> tuple[Operations, tuple[str, ...]]:
    """``narrow`` as a policy decision reads it: the effective operations and no reason, or none and each reason
    (``rule R: operations.git.push[0]: ...``) by which ``asked`` widens ``granted``."""
    try:
        return narrow(rule, granted, asked), ()
    except PolicyDenied as denied:
        return NO_OPERATIONS, tuple(f"rule {rule}: {reason}" for reason in denied.reasons)
