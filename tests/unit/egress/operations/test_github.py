"""``github_api`` and ``http`` decisions: routes deny before allow, spellings that must not slip past, reviews, GraphQL."""

from __future__ import annotations

import json
from typing import Any

import pytest

from broker.egress.operations import Decision, Kind, read_operations
from broker.egress.operations.checker import OperationsChecker
from broker.egress.operations.graphql_doc import MAX_DOCUMENT
from broker.egress.operations.jsonbody import MAX_JSON_BODY
from broker.vocab.errors import PolicyFileError
from broker.vocab.fields import Fields

API = "api.github.com"
RULE = "dev-agents"
MUTATIONS = ["addComment", "createPullRequest", "addPullRequestReview", "submitPullRequestReview"]


def checker(**api: Any) -> OperationsChecker:
    section = {
        "hosts": [f"{API}:443"],
        "allow": ["GET *", "POST /repos/*/*/pulls", "PATCH /repos/*/*/pulls/*", "POST /repos/*/*/pulls/*/reviews",
                  "POST /repos/*/*/pulls/*/reviews/*/events", "PUT /repos/*/*/contents/*"],
        "deny": ["PUT /repos/*/*/pulls/*/merge", "GET /repos/*/*/actions/secrets"],
        "graphql_mutations": MUTATIONS,
    } | api  # fmt: skip
    document = {
        "github_api": section,
        "git": {"hosts": ["github.com:443"], "push": ["refs/heads/agent/*"]},
        "http": {"pypi.org:443": {"methods": ["GET", "HEAD"], "paths": ["/simple/*", "/packages/*"]}},
    }
    return OperationsChecker(read_operations(Fields(document, "operations", PolicyFileError)), RULE)


CHECKER = checker()


def decide(
    method: str,
    target: str,
    body: bytes | object = b"",
    headers: tuple[tuple[str, str], ...] = (),
    host: str = API,
    using: OperationsChecker = CHECKER,
    pieces: int = 3,
) -> Decision:
    step = using.check(host, 443, method.encode(), target.encode(), [(k.encode(), v.encode()) for k, v in headers])
    if isinstance(step, Decision):
        return step
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    size = max(1, -(-len(data) // pieces))
    for at in range(0, len(data), size):
        decision = step.feed(data[at : at + size])
        if decision is not None:
            return decision
    return step.end()


def github_error(decision: Decision) -> dict[str, Any]:
    assert not decision.allowed and decision.answer is not None
    assert decision.answer.status == 403
    assert decision.answer.content_type == "application/json; charset=utf-8"
    document: dict[str, Any] = json.loads(decision.answer.body)
    assert document["message"].startswith(f"refused by policy {RULE}: ")
    assert document["documentation_url"].startswith("https://")
    return document


def test_allow_deny_and_everything_else() -> None:
    assert decide("GET", "/repos/o/r/pulls?state=open").allowed
    assert decide("POST", "/repos/o/r/pulls", {"title": "x"}).allowed
    merge = decide("PUT", "/repos/o/r/pulls/1/merge")
    assert github_error(merge)["message"] == (
        "refused by policy dev-agents: PUT /repos/o/r/pulls/1/merge matches deny PUT /repos/*/*/pulls/*/merge"
    )
    assert not decide("GET", "/repos/o/r/actions/secrets").allowed  # deny wins over GET *
    assert github_error(decide("DELETE", "/repos/o/r"))["message"].endswith("DELETE /repos/o/r is not in allow")
    assert not decide("POST", "/repos/o/r/issues").allowed


@pytest.mark.parametrize(
    "target",
    [
        "/repos/o/r/pulls/1/merge/",
        "/repos/o/r/pulls/1/%6Derge",
        "/repos/o/r/pulls/1/MERGE",
        "/Repos/o/r/Pulls/1/Merge",
        "/repos/o/r/pulls/1%2Fmerge",
        "/repos/o/r/pulls%2F1%2Fmerge",
        "/repos/o/r/pulls/1/merge?x=/..",
        "/repos/o/r/pulls/1//merge",
        "/repos/o/r/pulls/1/./merge",
        "/repos/o/r/pulls/2/../1/merge",
        "/repos/o/r/pulls/1/merge;x",
        "/repos/o/r/pulls/1/merge%00",
        "https://api.github.com/repos/o/r/pulls/1/merge",
    ],
)
def test_another_spelling_of_a_denied_route_is_refused(target: str) -> None:
    wide = checker(allow=["PUT *"])
    assert decide("PUT", "/repos/o/r/contents/x", using=wide).allowed
    assert not decide("PUT", target, using=wide).allowed


@pytest.mark.parametrize("method", ["put", "Put"])
def test_the_method_checked_is_the_method_run(method: str) -> None:
    # A method named in a header (X-HTTP-Method-Override and its kin) is refused before the operations decide, on
    # every terminated host: tests/security/egress/test_overrides.py.
    assert not decide(method, "/repos/o/r/pulls/1/merge", using=checker(allow=["* *"])).allowed


@pytest.mark.parametrize(
    ("deny", "target"),
    [
        ("PUT /repos/*/*/pulls/*/merge", "/repositories/1296269/pulls/1/merge"),
        ("PUT /repos/octo/widgets/pulls/*/merge", "/repositories/1296269/pulls/1/merge"),  # any repo the id may be
        ("PUT /repos/o*/w*/pulls/*/merge", "/Repositories/1296269/pulls/1/merge/"),
        ("PUT /repos/*", "/repositories/1296269/pulls/1/merge"),
        ("PUT /api/v3/repos/*/*/pulls/*/merge", "/api/v3/repositories/1296269/pulls/1/merge"),
        ("PUT /repositories/*/pulls/*/merge", "/repositories/1296269/pulls/1/merge"),  # the id form, written
        ("DELETE /orgs/*/members/*", "/organizations/9919/members/x"),
        ("PATCH /users/*", "/user/583231"),
    ],
)
def test_a_deny_route_holds_for_github_s_by_id_spelling(deny: str, target: str) -> None:
    method = deny.partition(" ")[0]
    wide = checker(allow=["* *"], deny=[deny])
    refused = decide(method, target, using=wide)
    assert "(by id, as /" in github_error(refused)["message"] or "/repositories/*" in deny
    assert decide(method, target.replace("1296269", "x1").replace("9919", "x1").replace("583231", "x1"), using=wide)


def test_an_allow_route_takes_the_by_id_spelling_only_for_every_name() -> None:
    assert decide("GET", "/repositories/1296269/issues?page=2", using=checker(allow=["GET *"])).allowed
    assert decide(
        "GET", "/repositories/1296269/issues", using=checker(allow=["GET /repo*/*/issues", "GET /repos/*/*/issues"])
    ).allowed
    for allow in ("GET /repos/*/*/issues", "GET /repos/octo/*/issues", "GET /repositories/*/issues"):
        refused = decide("GET", "/repositories/1296269/issues", using=checker(allow=[allow]))
        assert github_error(refused)["message"].endswith("is not in allow")
    assert decide("GET", "/repositories", using=checker(allow=["GET /repositories"])).allowed


@pytest.mark.parametrize("query", ["?event=APPROVE", "?event=COMMENT", "?%65vent=approve", "?x=1&event=approve"])
def test_a_review_carries_its_event_in_its_body_alone(query: str) -> None:
    for target in ("/repos/o/r/pulls/1/reviews", "/repos/o/r/pulls/1/reviews/7/events"):
        refused = decide("POST", target + query, {})
        assert github_error(refused)["message"].endswith("never a query string")
    assert decide("POST", "/repos/o/r/pulls/1/reviews?event=APPROVE", {}, using=checker(reviews={"approve": True}))


@pytest.mark.parametrize("event", ["APPROVE", "approve", " Approve "])
def test_an_approving_review_is_refused(event: str) -> None:
    for target in ("/repos/o/r/pulls/1/reviews", "/repos/o/r/pulls/1/reviews/7/events", "/repos/o/r/pulls/1/reviews/"):
        refused = decide("POST", target, {"body": "lgtm", "event": event}, pieces=5)
        assert github_error(refused)["message"].endswith("a review with event APPROVE: reviews.approve is false")


def test_other_reviews_pass_and_approve_true_lets_approvals_through() -> None:
    assert decide("POST", "/repos/o/r/pulls/1/reviews", {"event": "COMMENT", "body": "x"}).allowed
    assert decide("POST", "/repos/o/r/pulls/1/reviews", {"body": "pending"}).allowed
    assert decide(
        "POST", "/repos/o/r/pulls/1/reviews", {"event": "APPROVE"}, using=checker(reviews={"approve": True})
    ).allowed


@pytest.mark.parametrize(
    ("body", "headers", "why"),
    [
        (b'{"event": "COMMENT", "event": "APPROVE"}', (), "a key given twice"),
        (b'["APPROVE"]', (), "one JSON object"),
        (b'{"event": 1}', (), "not a string"),
        (b'{"event": "APPROVE"', (), "not JSON"),
        (b'{"event": NaN}', (), "NaN"),
        ('{"event": "APPROVE"}'.encode("utf-16"), (), "not UTF-8"),
        (b"[" * 100_000, (), "nested too deeply"),
        (b'{"event": "COMMENT"}', (("Content-Encoding", "gzip"),), "content-encoded"),
        (b" " * (MAX_JSON_BODY + 1), (), "larger than"),
    ],
)
def test_a_review_body_the_broker_cannot_read_for_sure_is_refused(
    body: bytes, headers: tuple[tuple[str, str], ...], why: str
) -> None:
    refused = decide("POST", "/repos/o/r/pulls/1/reviews", body, headers=headers)
    assert not refused.allowed and why in refused.reason, refused.reason


def graphql(query: str, pieces: int = 4, using: OperationsChecker = CHECKER, **extra: Any) -> Decision:
    return decide("POST", "/graphql", {"query": query, **extra}, pieces=pieces, using=using)


def test_graphql_queries_pass_and_listed_mutations_pass() -> None:
    assert graphql("{ viewer { login } }").allowed
    assert graphql("query Q($n: Int) { viewer { repositories(first: $n) { totalCount } } }", variables={"n": 1}).allowed
    assert graphql("query { __schema { types { name } } }").allowed  # introspection is a query
    assert graphql('mutation { addComment(input: {subjectId: "x", body: "y"}) { clientMutationId } }').allowed
    assert graphql("mutation { a: addComment(input: {}) { __typename } __typename }").allowed
    assert graphql("{ viewer { login } }", using=checker(allow=[])).allowed  # the endpoint needs no allow route


@pytest.mark.parametrize(
    ("document", "extra", "why"),
    [
        ("mutation { mergePullRequest(input: {}) { clientMutationId } }", {}, "mutation mergePullRequest"),
        ("mutation { addComment: mergePullRequest(input: {}) { clientMutationId } }", {}, "mergePullRequest"),
        (
            "mutation { ...M } fragment M on Mutation { mergePullRequest(input: {}) { __typename } }",
            {},
            "mergePullRequest",
        ),
        ("mutation { ... on Mutation { ... { mergePullRequest(input: {}) { __typename } } } }", {}, "mergePullRequest"),
        (
            "mutation { ...A } fragment A on Mutation { ...B } fragment B on Mutation { deleteRef(input: {}) { __typename } }",
            {},
            "deleteRef",
        ),
        (
            "query Q { viewer { login } } mutation M { mergePullRequest(input: {}) { __typename } }",
            {"operationName": "Q"},
            "mergePullRequest (in operation M)",
        ),
        ("mutation { __schema { types { name } } }", {}, "mutation __schema"),
        ("subscription { issueUpdated { id } }", {}, "subscriptions"),
        ("mutation { addComment(input: {}) { id } ", {}, "not a GraphQL document"),
        ("type Mutation { x: Int }", {}, "type definitions"),
        ("fragment F on Query { viewer { login } }", {}, "without an operation"),
        ("mutation { ...Missing }", {}, "fragment Missing is not defined"),
        ("query { a } fragment F on Q { a } fragment F on Q { b }", {}, "defined twice"),
        ("{" * 5000 + "}" * 5000, {}, "GraphQL"),
        ("{ a }" + " " * MAX_DOCUMENT, {}, "longer than"),
        ("{ viewer { login } }", {"variables": [1]}, "variables that are not an object"),
        ("{ viewer { login } }", {"operationName": 7}, "operationName"),
        (
            'mutation { addPullRequestReview(input: {pullRequestId: "x", event: APPROVE}) { __typename } }',
            {},
            "addPullRequestReview with event APPROVE",
        ),
        (
            "mutation($e: PullRequestReviewEvent!) { submitPullRequestReview(input: {event: $e}) { __typename } }",
            {"variables": {"e": "APPROVE"}},
            "submitPullRequestReview with event APPROVE",
        ),
        (
            "mutation($i: AddPullRequestReviewInput!) { addPullRequestReview(input: $i) { __typename } }",
            {"variables": {"i": {"pullRequestId": "x", "event": "APPROVE"}}},
            "event APPROVE",
        ),
        (
            "mutation($e: PullRequestReviewEvent = APPROVE) { addPullRequestReview(input: {event: $e}) { __typename } }",
            {},
            "event APPROVE",
        ),
    ],
)
def test_graphql_documents_that_do_more_than_allowed_are_refused(
    document: str, extra: dict[str, Any], why: str
) -> None:
    refused = graphql(document, **extra)
    error = github_error(refused)
    assert why in refused.reason, refused.reason
    assert error["errors"] == [{"type": "FORBIDDEN", "message": error["message"]}]


def test_graphql_review_mutations_that_do_not_approve_pass() -> None:
    comment = "mutation($e: PullRequestReviewEvent) { addPullRequestReview(input: {event: $e}) { __typename } }"
    assert graphql(comment, variables={"e": "COMMENT"}).allowed
    assert graphql('mutation { addPullRequestReview(input: {pullRequestId: "x"}) { __typename } }').allowed


@pytest.mark.parametrize(
    ("method", "target", "body", "why"),
    [
        ("GET", "/graphql?query={viewer{login}}", b"", "GraphQL is a POST"),
        ("POST", "/graphql?query=mutation{mergePullRequest}", b'{"query": "{ a }"}', "no query string"),
        ("POST", "/graphql", b'{"query": "{ a }", "query": "mutation { mergePullRequest { a } }"}', "twice"),
        ("POST", "/graphql", b'[{"query": "{ a }"}]', "one JSON object"),
        ("POST", "/graphql", b'{"extensions": {"persistedQuery": {"sha256Hash": "ab"}}}', "persisted"),
        ("POST", "/graphql/", b'{"query": "mutation { mergePullRequest { a } }"}', "mergePullRequest"),
        ("POST", "/GraphQL", b'{"query": "mutation { mergePullRequest { a } }"}', "mergePullRequest"),
        ("POST", "/api/graphql", b'{"query": "mutation { mergePullRequest { a } }"}', "mergePullRequest"),
    ],
)
def test_graphql_requests_are_read_the_one_way(method: str, target: str, body: bytes, why: str) -> None:
    refused = decide(method, target, body, using=checker(allow=["* *"]))
    assert not refused.allowed and why in refused.reason, refused.reason


def test_a_deny_route_holds_for_the_graphql_endpoint_too() -> None:
    assert not decide("POST", "/graphql", {"query": "{ a }"}, using=checker(deny=["POST /graphql"])).allowed


def test_http_hosts_take_their_methods_and_paths() -> None:
    assert decide("GET", "/simple/requests/", host="pypi.org").allowed
    assert decide("HEAD", "/packages/a/b/c.whl", host="pypi.org").allowed
    refused = decide("POST", "/legacy/", host="pypi.org")
    assert refused.kind is Kind.HTTP and refused.answer is not None and refused.answer.status == 403
    assert refused.answer.body == b"refused by policy dev-agents: POST is not among the methods for pypi.org:443\n"
    assert not decide("GET", "/pypi/requests/json", host="pypi.org").allowed
    assert not decide("GET", "/simple", host="pypi.org").allowed


def test_a_git_host_passes_fetches_and_refuses_what_is_not_git() -> None:
    assert decide("GET", "/o/r.git/info/refs?service=git-upload-pack", host="github.com").allowed
    assert decide("POST", "/o/r.git/git-upload-pack", b"0000", host="github.com").allowed
    assert decide("GET", "/o/r.git/info/refs?service=git-receive-pack", host="github.com").allowed
    assert not decide("GET", "/o/r/archive/main.zip", host="github.com").allowed
    assert not decide("PROPFIND", "/o/r.git/", host="github.com").allowed  # dumb-HTTP (WebDAV) pushes


def test_hosts_without_operations_are_not_limited() -> None:
    assert not CHECKER.limits("example.com", 443)
    passed = decide("DELETE", "/anything", host="example.com")
    assert passed.allowed and passed.kind is Kind.NONE
    assert CHECKER.limits(API, 443) and not CHECKER.limits(API, 8443)
