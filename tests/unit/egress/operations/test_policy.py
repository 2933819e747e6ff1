"""Reading ``operations`` strictly, checking its hosts against ``network``, and a manifest narrowing a rule's."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from broker.egress.destinations import parse_destination
from broker.egress.operations import Decision, Operations, check_network, narrow, read_operations
from broker.egress.operations.checker import OperationsChecker
from broker.vocab.errors import ManifestError, PolicyDenied, PolicyFileError
from broker.vocab.fields import Fields

SPEC_RULE = yaml.safe_load(
    """
    network: ["github.com:443", "api.github.com:443", "pypi.org:443"]
    operations:
      git:
        hosts: ["github.com:443"]
        push: ["refs/heads/agent/*"]
        delete: false
      github_api:
        hosts: ["api.github.com:443"]
        allow: ["GET *", "POST /repos/*/*/pulls", "PATCH /repos/*/*/pulls/*",
                "POST /repos/*/*/issues/*/comments"]
        deny: ["PUT /repos/*/*/pulls/*/merge"]
        reviews: {approve: false}
        graphql_mutations: []
      http:
        "pypi.org:443": {methods: [GET, HEAD]}
    """
)


def rule_fields(document: dict[str, Any]) -> Fields:
    return Fields(document, "rules[0]", PolicyFileError)


def ops(operations: dict[str, Any], error: type[PolicyFileError] | type[ManifestError] = PolicyFileError) -> Operations:
    fields = Fields({"operations": operations}, "rules[0]", error)
    return read_operations(fields.mapping("operations"))


def refusal(operations: dict[str, Any]) -> str:
    with pytest.raises(PolicyFileError) as caught:
        ops(operations)
    return caught.value.message


def test_the_spec_example_reads_and_explains_itself() -> None:
    fields = rule_fields(SPEC_RULE)
    operations = read_operations(fields.mapping("operations"))
    network = tuple(parse_destination(d) for d in SPEC_RULE["network"])
    check_network(fields, operations, network)
    assert operations.to_json() == {
        "git": [{"hosts": ["github.com:443"], "push": ["refs/heads/agent/*"], "delete": False}],
        "github_api": [
            {
                "hosts": ["api.github.com:443"],
                "allow": [
                    "GET *",
                    "POST /repos/*/*/pulls",
                    "PATCH /repos/*/*/pulls/*",
                    "POST /repos/*/*/issues/*/comments",
                ],
                "deny": ["PUT /repos/*/*/pulls/*/merge"],
                "reviews": {"approve": False},
                "graphql_mutations": [],
            }
        ],
        "http": [{"host": "pypi.org:443", "methods": ["GET", "HEAD"], "paths": ["*"]}],
        "mcp": [],
    }
    assert [str(h) for h in operations.hosts()] == ["github.com:443", "api.github.com:443", "pypi.org:443"]


def test_defaults_are_the_narrow_ones() -> None:
    operations = ops({"git": {"hosts": ["github.com:443"]}, "github_api": {"hosts": ["api.github.com:443"]}})
    git, api = operations.git[0], operations.github_api[0]
    assert (git.push, git.delete) == ((), False)
    assert (api.allow, api.deny, api.approve, api.graphql_mutations) == ((), (), False, ())
    assert read_operations(None).empty


@pytest.mark.parametrize(
    ("operations", "message"),
    [
        ({"gti": {}}, "rules[0].operations.gti: unknown key"),
        ({"git": {"hosts": ["github.com:443"], "pushes": []}}, "rules[0].operations.git.pushes: unknown key"),
        ({"git": {"hosts": []}}, "rules[0].operations.git.hosts: expected a list of at least one HOST:PORT"),
        ({"git": {"push": ["refs/heads/x"]}}, "rules[0].operations.git.hosts: expected a list"),
        ({"git": {"hosts": ["github.com"]}}, "rules[0].operations.git.hosts[0]: 'github.com': expected HOST:PORT"),
        (
            {"git": {"hosts": ["github.com:443", "github.com:443"]}},
            "rules[0].operations.git.hosts[1]: github.com:443 is listed twice",
        ),
        (
            {"git": {"hosts": ["github.com:443"], "push": ["refs/heads/agent/**"]}},
            "rules[0].operations.git.push[0]: 'refs/heads/agent/**': ** is not a pattern here",
        ),
        (
            {"git": {"hosts": ["github.com:443"], "push": ["heads/agent/*"]}},
            "rules[0].operations.git.push[0]: 'heads/agent/*': a full ref name starts with refs/",
        ),
        (
            {"git": {"hosts": ["github.com:443"], "delete": "no"}},
            "rules[0].operations.git.delete: expected true or false",
        ),
        (
            {"github_api": {"hosts": ["api.github.com:443"], "allow": ["GET  /x"]}},
            "rules[0].operations.github_api.allow[0]: 'GET /x': expected METHOD PATH with exactly one space",
        ),
        (
            {"github_api": {"hosts": ["api.github.com:443"], "deny": ["put /x"]}},
            "rules[0].operations.github_api.deny[0]: 'put /x': a method is an upper-case token",
        ),
        (
            {"github_api": {"hosts": ["api.github.com:443"], "reviews": {"approve": False, "dismiss": True}}},
            "rules[0].operations.github_api.reviews.dismiss: unknown key",
        ),
        (
            {"github_api": {"hosts": ["api.github.com:443"], "graphql_mutations": ["merge-pull-request"]}},
            "rules[0].operations.github_api.graphql_mutations[0]: 'merge-pull-request' is not valid",
        ),
        (
            {"http": {"pypi.org:443": {"methods": []}}},
            "rules[0].operations.http.pypi.org:443.methods: needs at least 1",
        ),
        (
            {"http": {"pypi.org:443": {"methods": ["get"]}}},
            "rules[0].operations.http.pypi.org:443.methods[0]: 'get': a method is an upper-case token",
        ),
        (
            {"http": {"pypi.org:443": {"methods": ["GET"], "paths": ["/simple/"]}}},
            "rules[0].operations.http.pypi.org:443.paths[0]: '/simple/': a path pattern does not end with /",
        ),
        (
            {"http": {"pypi.org:443": {"methods": ["GET"], "verbs": []}}},
            "rules[0].operations.http.pypi.org:443.verbs: unknown key",
        ),
        (
            {"http": {"pypi.org": {"methods": ["GET"]}}},
            "rules[0].operations.http.pypi.org: 'pypi.org': expected HOST:PORT",
        ),
        (
            {"http": {"*.example.com:443": {"methods": ["GET"]}, "a.example.com:443": {"methods": ["GET"]}}},
            "rules[0].operations.http.a.example.com:443: overlaps *.example.com:443",
        ),
        (
            {"github_api": {"hosts": ["api.github.com:443"]}, "http": {"api.github.com:443": {"methods": ["GET"]}}},
            "rules[0].operations.http.api.github.com:443: overlaps github_api host api.github.com:443",
        ),
        ({"git": ["github.com:443"]}, "rules[0].operations.git: expected a mapping"),
    ],
)
def test_malformed_operations_are_refused_with_one_line_naming_the_key(
    operations: dict[str, Any], message: str
) -> None:
    text = refusal(operations)
    assert text.startswith(message), text
    assert "\n" not in text


def test_a_manifest_error_is_a_manifest_error() -> None:
    with pytest.raises(ManifestError, match=r"operations\.git\.push\[0\]"):
        ops({"git": {"hosts": ["github.com:443"], "push": [1]}}, ManifestError)


def test_git_may_share_a_host_with_github_api_or_http() -> None:
    both = ops({"git": {"hosts": ["ghe.example.com:443"]}, "github_api": {"hosts": ["ghe.example.com:443"]}})
    assert both.limits("ghe.example.com", 443)
    assert ops({"git": {"hosts": ["github.com:443"]}, "http": {"github.com:443": {"methods": ["GET"]}}}).http


def test_every_operations_host_needs_its_network_entry() -> None:
    fields = rule_fields(SPEC_RULE)
    operations = read_operations(fields.mapping("operations"))
    for missing, key in (
        ("github.com:443", "rules[0].operations.git.hosts[0]"),
        ("api.github.com:443", "rules[0].operations.github_api.hosts[0]"),
        ("pypi.org:443", "rules[0].operations.http.pypi.org:443"),
    ):
        network = tuple(parse_destination(d) for d in SPEC_RULE["network"] if d != missing)
        with pytest.raises(PolicyFileError) as caught:
            check_network(fields, operations, network)
        assert caught.value.message == f"{key}: {missing} has no matching entry in network"
    wildcard = (
        parse_destination("*.github.com:443"),
        parse_destination("github.com:443"),
        parse_destination("pypi.org:443"),
    )
    check_network(fields, operations, wildcard)


# -- narrowing ---------------------------------------------------------------------------------

RULE = ops(SPEC_RULE["operations"])


def denial(asked: dict[str, Any]) -> PolicyDenied:
    with pytest.raises(PolicyDenied) as caught:
        narrow("dev-agents", RULE, ops(asked, ManifestError))
    assert caught.value.exit_code == 3
    return caught.value


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        (
            {"git": {"hosts": ["github.com:443"], "push": ["refs/heads/*"]}},
            "operations.git.push[0]: refs/heads/* is not within the rule's push (refs/heads/agent/*)",
        ),
        (
            {"git": {"hosts": ["github.com:443"], "delete": True}},
            "operations.git.delete: true where the rule's is false",
        ),
        (
            {"github_api": {"hosts": ["api.github.com:443"], "allow": ["PUT *"]}},
            "operations.github_api.allow[0]: PUT * is not within the rule's allow",
        ),
        (
            {"github_api": {"hosts": ["api.github.com:443"], "reviews": {"approve": True}}},
            "operations.github_api.reviews.approve: true where the rule's is false",
        ),
        (
            {"github_api": {"hosts": ["api.github.com:443"], "graphql_mutations": ["mergePullRequest"]}},
            "operations.github_api.graphql_mutations[0]: mergePullRequest is not among the rule's (none)",
        ),
        (
            {"http": {"pypi.org:443": {"methods": ["GET", "POST"]}}},
            "operations.http.pypi.org:443.methods[1]: POST is not among the rule's methods",
        ),
        (
            {"http": {"github.com:443": {"methods": ["GET"]}}},
            "operations.http.github.com:443: the rule limits github.com:443 and not with http there",
        ),
        (
            {"git": {"hosts": ["api.github.com:443"]}},
            "operations.git.hosts[0]: the rule limits api.github.com:443 and not with git there",
        ),
        (
            {"git": {"hosts": ["*.github.com:443"]}},
            "operations.git.hosts[0]: the rule limits *.github.com:443 and not with git there",
        ),
    ],
)
def test_a_manifest_never_widens_and_the_denial_names_the_key(asked: dict[str, Any], message: str) -> None:
    denied = denial(asked)
    assert denied.message.startswith(f"the manifest's operations widen rule dev-agents: {message}")
    assert denied.reasons[0].startswith(message)


def test_every_widening_key_is_a_reason() -> None:
    denied = denial({"git": {"hosts": ["github.com:443"], "push": ["refs/heads/*", "refs/tags/*"], "delete": True}})
    assert [r.split(":")[0] for r in denied.reasons] == [
        "operations.git.push[0]",
        "operations.git.push[1]",
        "operations.git.delete",
    ]


def test_a_narrower_manifest_gives_the_effective_operations() -> None:
    rule = ops(
        {
            "git": {"hosts": ["github.com:443"], "push": ["refs/heads/agent/*"], "delete": True},
            "github_api": {
                "hosts": ["api.github.com:443"],
                "allow": ["GET *", "PUT /repos/*/*/pulls/*"],
                "deny": ["PUT /repos/*/*/pulls/*/merge"],
                "graphql_mutations": ["addComment", "createPullRequest"],
            },
        }
    )
    asked = ops(
        {
            "git": {"hosts": ["github.com:443"], "push": ["refs/heads/agent/task-7*"]},
            "github_api": {
                "hosts": ["api.github.com:443"],
                "allow": ["GET /repos/*", "PUT /repos/octo/*/pulls/*"],
                "graphql_mutations": ["addComment"],
            },
            "http": {"files.example.com:443": {"methods": ["GET"]}},
        },
        ManifestError,
    )
    effective = narrow("dev-agents", rule, asked)
    assert effective.git[0] == asked.git[0] and effective.git[1] == rule.git[0]
    assert [str(r) for r in effective.github_api[0].deny] == ["PUT /repos/*/*/pulls/*/merge"]  # the rule's deny stays
    checker = OperationsChecker(effective, "dev-agents")

    def decided(host: str, method: str, target: str) -> Decision:
        step = checker.check(host, 443, method, target)
        assert isinstance(step, Decision)
        return step

    assert decided("api.github.com", "PUT", "/repos/octo/r/pulls/1").allowed
    assert not decided("api.github.com", "PUT", "/repos/octo/r/pulls/1/merge").allowed  # manifest allows, rule denies
    assert not decided("api.github.com", "GET", "/user").allowed  # outside the manifest's narrower allow
    assert not decided("files.example.com", "POST", "/upload").allowed  # a host the rule did not limit, now limited
    assert decided("files.example.com", "GET", "/x").allowed


def test_a_host_the_manifest_leaves_out_keeps_the_rule_limits() -> None:
    rule = ops({"git": {"hosts": ["github.com:443", "ghe.example.com:443"], "push": ["refs/heads/agent/*"]}})
    asked = ops({"git": {"hosts": ["github.com:443"], "push": ["refs/heads/agent/x"]}}, ManifestError)
    effective = narrow("dev-agents", rule, asked)
    checker = OperationsChecker(effective, "dev-agents")
    assert checker.limits("ghe.example.com", 443)
    step = checker.check("ghe.example.com", 443, "GET", "/o/r/archive.zip")
    assert isinstance(step, Decision) and not step.allowed


def test_no_manifest_operations_means_the_rule_operations() -> None:
    assert narrow("dev-agents", RULE, Operations()) is RULE
