"""``github_api`` on its hosts: ``METHOD PATH`` routes, deny before allow, GraphQL mutations, review approvals.

For each reading of the path (see ``routes``): a ``deny`` route that matches
refuses; then a POST to the GraphQL endpoint (``/graphql``, or ``/api/graphql``
on GitHub Enterprise Server) is decided on its document (``graphql_doc``:
queries pass whether or not ``allow`` names the endpoint, mutations only when
listed); otherwise an ``allow`` route must match every reading, and everything
else is refused. With ``reviews: {approve: false}`` (the default) a review
created or submitted with event ``APPROVE`` is refused (``POST
/repos/O/R/pulls/N/reviews`` and ``.../reviews/ID/events``, their body read);
a review there carries its event in its JSON body alone, so one with a query
string is refused (as GraphQL is: a server may read the event from either).

GitHub also answers a repository's routes by its id, ``/repositories/ID/...``
(what its pagination links name), an organisation's by
``/organizations/ID/...`` and a user by ``/user/ID``, under ``/api/v3`` on
GitHub Enterprise Server too. Such a path has one more reading, its name
form, in which the names the id stands for are unknown
(``/repos/?/?/pulls/1/merge``): a ``deny`` route (and the review check)
applies when it would for some name there, an ``allow`` route only when it
would for every name (its segment there is ``*``). So ``deny: PUT
/repos/*/*/pulls/*/merge`` refuses ``PUT /repositories/1296269/pulls/1/merge``
under any allow, and a deny naming one repository refuses the id spelling for
every repository, since the proxy cannot tell which one an id is.

A method or path named in a header (``X-HTTP-Method-Override`` and its kin)
is refused before any operations decide (``broker.egress.terminate.guards``). A body the
broker must read may not be content-encoded. A refusal is a 403 in GitHub's
own error shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from broker.egress.operations.decision import Decision, Kind, allowed, refused_github
from broker.egress.operations.graphql_doc import check_request
from broker.egress.operations.jsonbody import JsonBodyCheck
from broker.egress.operations.model import APPROVE, GithubApiOperations
from broker.egress.operations.routes import ANY_METHOD, Route
from broker.egress.operations.segments import SegmentGlob

GRAPHQL_PATHS = frozenset({"/graphql", "/api/graphql"})
REVIEW_PATHS = tuple(
    SegmentGlob.of(prefix + path, leading_slash=True)
    for prefix in ("", "/api/v3")
    for path in ("/repos/*/*/pulls/*/reviews", "/repos/*/*/pulls/*/reviews/*/events")
)
#: GitHub's id spellings: the first segment, the name form's, and how many names the id stands for.
ID_SPELLINGS = {"repositories": ("repos", 2), "organizations": ("orgs", 1), "user": ("users", 1)}
#: A name the id hides, in a name-form reading: no pattern holds ``%``, so only a ``*`` segment matches it, and a
#: canonical request path never holds ``%00``.
UNKNOWN = "%00"
_ID = re.compile(r"[0-9]{1,20}")


@dataclass(frozen=True)
class Reading:
    """One reading of a request path: ``path`` (canonical), ``unknown`` the indexes of its segments that stand for
    a name an id hides (none for a path as written), ``shown`` how refusals name it."""

    path: str
    unknown: tuple[int, ...] = ()
    shown: str = ""

    def __str__(self) -> str:
        return self.shown or self.path


def readings(paths: tuple[str, ...]) -> tuple[Reading, ...]:
    """Each canonical path as written, and the name form of one in an id spelling (see the module docstring)."""
    found = [Reading(path) for path in paths]
    for path in paths:
        segments = path[1:].split("/")
        at = 2 if segments[:2] == ["api", "v3"] else 0
        if len(segments) < at + 2 or segments[at] not in ID_SPELLINGS or not _ID.fullmatch(segments[at + 1]):
            continue
        first, names = ID_SPELLINGS[segments[at]]
        holes = tuple(range(at + 1, at + 1 + names))
        named = [*segments[:at], first, *([UNKNOWN] * names), *segments[at + 2 :]]
        shown = "/" + "/".join([*segments[:at], first, *(["{name}"] * names), *segments[at + 2 :]])
        found.append(Reading("/" + "/".join(named), holes, f"{path} (by id, as {shown})"))
    return tuple(found)


def may_match(glob: SegmentGlob, reading: Reading) -> bool:
    """Whether ``glob`` matches ``reading`` for some name where its names are unknown (a deny, the review check)."""
    if glob.anything or not reading.unknown:
        return glob.matches(reading.path)
    segments = reading.path[1:].split("/")
    for index in reading.unknown:  # a value the glob's own segment takes: segments are matched one by one
        segments[index] = glob.segments[index].replace("*", "x") if index < len(glob.segments) else "x"
    return glob.matches("/" + "/".join(segments))


def _denies(route: Route, method: str, reading: Reading) -> bool:
    return route.method in (ANY_METHOD, method) and may_match(route.path, reading)


def check_api(
    section: GithubApiOperations,
    rule: str,
    method: str,
    paths: tuple[str, ...],
    query: str,
    encoding: str,
) -> Decision | JsonBodyCheck:
    """The head's decision, or the body check of a GraphQL request or a review."""
    every = readings(paths)
    for reading in every:
        denied = next((route for route in section.deny if _denies(route, method, reading)), None)
        if denied is not None:
            return refused_github(rule, f"{method} {reading} matches deny {denied}")
    if any(path in GRAPHQL_PATHS for path in paths):
        return _graphql(section, rule, method, query, encoding)
    matched = []
    for reading in every:  # an unknown name is matched by a * segment alone: allowed for every name
        route = next((route for route in section.allow if route.matches(method, reading.path)), None)
        if route is None:
            return refused_github(rule, f"{method} {reading} is not in allow")
        matched.append(route)
    if not section.approve and method == "POST" and any(may_match(g, r) for g in REVIEW_PATHS for r in every):
        if query:
            return refused_github(rule, "a review takes its event from its JSON body alone, never a query string")
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
