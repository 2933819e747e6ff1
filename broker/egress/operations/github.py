"""``github_api`` on its hosts: ``METHOD PATH`` routes, deny before allow, GraphQL mutations, review approvals.

For each reading of the path (see ``routes``): a ``deny`` route that matches
refuses; then a POST to the GraphQL endpoint (``/graphql``, or ``/api/graphql``
on GitHub Enterprise Server) is decided on its document (``graphql_doc``:
queries pass whether or not ``allow`` names the endpoint, mutations only when
listed); otherwise an ``allow`` route must match every reading, and everything
else is refused. With ``reviews: {approve: false}`` (the default) a review
created or submitted with event ``APPROVE`` is refused (``POST
/repos/O/R/pulls/N/reviews`` and ``.../reviews/ID/events``, their body read).

A method or path named in a header (``X-HTTP-Method-Override`` and its kin)
is refused before any operations decide (``broker.egress.guards``). A body the
broker must read may not be content-encoded. A refusal is a 403 in GitHub's
own error shape.
"""

from __future__ import annotations

from broker.egress.operations.decision import Decision, Kind, allowed, refused_github
from broker.egress.operations.graphql_doc import check_request
from broker.egress.operations.jsonbody import JsonBodyCheck
from broker.egress.operations.model import APPROVE, GithubApiOperations
from broker.egress.operations.segments import SegmentGlob

GRAPHQL_PATHS = frozenset({"/graphql", "/api/graphql"})
REVIEW_PATHS = tuple(
    SegmentGlob.of(prefix + path, leading_slash=True)
    for prefix in ("", "/api/v3")
    for path in ("/repos/*/*/pulls/*/reviews", "/repos/*/*/pulls/*/reviews/*/events")
)


def check_api(
    section: GithubApiOperations,
    rule: str,
    method: str,
    paths: tuple[str, ...],
    query: str,
    encoding: str,
) -> Decision | JsonBodyCheck:
    """The head's decision, or the body check of a GraphQL request or a review."""
    for path in paths:
        denied = next((route for route in section.deny if route.matches(method, path)), None)
        if denied is not None:
            return refused_github(rule, f"{method} {path} matches deny {denied}")
    if any(path in GRAPHQL_PATHS for path in paths):
        return _graphql(section, rule, method, query, encoding)
    matched = []
    for path in paths:
        route = next((route for route in section.allow if route.matches(method, path)), None)
        if route is None:
            return refused_github(rule, f"{method} {path} is not in allow")
        matched.append(route)
    if not section.approve and method == "POST" and any(g.matches(p) for g in REVIEW_PATHS for p in paths):
        if encoding:
            return refused_github(rule, "a review whose body is content-encoded cannot be read")
        return JsonBodyCheck(lambda body: _review(rule, body), lambda reason: refused_github(rule, reason))
    return allowed(rule, Kind.GITHUB_API, f"{method} {paths[0]} matches allow {matched[0]}")


def _graphql(
    section: GithubApiOperations, rule: str, method: str, query: str, encoding: str
) -> Decision | JsonBodyCheck:
    if method != "POST" or query:
        return refused_github(rule, "GraphQL is a POST with a JSON body and no query string", graphql=True)
    if encoding:
        return refused_github(rule, "a GraphQL body that is content-encoded cannot be read", graphql=True)
    mutations = frozenset(section.graphql_mutations)

    def decide(body: object) -> Decision:
        reason = check_request(body, mutations, section.approve)
        if reason is not None:
            return refused_github(rule, reason, graphql=True)
        return allowed(rule, Kind.GITHUB_API, "a GraphQL document within graphql_mutations")

    return JsonBodyCheck(decide, lambda reason: refused_github(rule, reason, graphql=True))


def _review(rule: str, body: object) -> Decision:
    if not isinstance(body, dict):
        return refused_github(rule, "a review body is one JSON object")
    event = body.get("event")
    if event is not None and not isinstance(event, str):
        return refused_github(rule, "a review event that is not a string")
    if isinstance(event, str) and event.strip().upper() == APPROVE:
        return refused_github(rule, "a review with event APPROVE: reviews.approve is false")
    return allowed(rule, Kind.GITHUB_API, f"a review with event {event or 'PENDING'}")
