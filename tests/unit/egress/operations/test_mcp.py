"""``operations.mcp`` read strictly and narrowed by a manifest (``broker.egress.operations.mcp``)."""

from __future__ import annotations

from typing import Any

import pytest

from broker.egress.destinations import parse_destination
from broker.egress.operations import Operations, check_network, narrow, read_operations
from broker.egress.operations.mcp.model import name_matches, plain_value
from broker.vocab.errors import ManifestError, PolicyDenied, PolicyFileError
from broker.vocab.fields import Fields

pytestmark = pytest.mark.unit

HOST = "mcp.example.com:443"
RULE: dict[str, Any] = {
    "mcp": {
        HOST: {
            "tools": {
                "allow": ["search_*", "get_issue", "create_pull_request"],
                "deny": ["delete_*", "merge_*"],
                "arguments": {"create_pull_request": {"repo": "octo-org/*", "base": "agent/*"}},
            },
            "resources": ["repo://octo-org/*"],
            "prompts": False,
        }
    }
}


def ops(operations: dict[str, Any], error: type[PolicyFileError] | type[ManifestError] = PolicyFileError) -> Operations:
    return read_operations(Fields({"operations": operations}, "rules[0]", error).mapping("operations"))


def refusal(operations: dict[str, Any]) -> str:
    with pytest.raises(PolicyFileError) as caught:
        ops(operations)
    return caught.value.message


def entry(**keys: Any) -> dict[str, Any]:
    return {"mcp": {HOST: keys}}


def test_the_spec_example_reads_and_its_host_needs_a_network_entry() -> None:
    operations = ops(RULE)
    assert operations.to_json()["mcp"] == [
        {
            "host": HOST,
            "tools": {
                "allow": ["search_*", "get_issue", "create_pull_request"],
                "deny": ["delete_*", "merge_*"],
                "arguments": {"create_pull_request": {"repo": "octo-org/*", "base": "agent/*"}},
            },
            "resources": ["repo://octo-org/*"],
            "prompts": {"allow": [], "deny": []},
        }
    ]
    assert [str(h) for h in operations.hosts()] == [HOST] and operations.limits("mcp.example.com", 443)
    fields = Fields({"operations": RULE}, "rules[0]", PolicyFileError)
    check_network(fields, operations, (parse_destination(HOST),))
    with pytest.raises(PolicyFileError, match=r"operations\.mcp\.mcp\.example\.com:443: .* no matching entry"):
        check_network(fields, operations, (parse_destination("api.github.com:443"),))


def test_defaults_are_narrow_and_prompts_take_a_boolean_or_names() -> None:
    [section] = ops(entry()).mcp
    assert (section.tools.allow, section.resources, section.prompts.allow) == ((), (), ())
    assert section.tool_refusal("get_issue", {}) == "tool get_issue is not in tools.allow"
    assert section.resource_refusal("repo://a/b") == "resource repo://a/b is not in resources"
    assert ops(entry(prompts=True)).mcp[0].prompts.allow == ("*",)
    named = ops(entry(prompts={"allow": ["review_*"], "deny": ["review_secrets"]})).mcp[0].prompts
    assert named.refusal("prompt", "review_pr") is None
    assert named.refusal("prompt", "REVIEW_SECRETS") == "prompt REVIEW_SECRETS matches prompts.deny review_secrets"


@pytest.mark.parametrize(
    ("operations", "message"),
    [
        (entry(tool={}), "rules[0].operations.mcp.mcp.example.com:443.tool: unknown key"),
        (entry(tools={"allow": ["get issue"]}), "tools.allow[0]: 'get issue' is not valid"),
        (entry(tools={"allow": ["get?"]}), "tools.allow[0]: 'get?' is not valid"),
        (entry(tools={"arguments": {"create_pull_request": {}}}), "create_pull_request: names no argument"),
        (entry(tools={"arguments": {"x": {"base": 1}}}), "arguments.x.base: expected a glob string, got an integer"),
        (entry(tools={"arguments": {"x": {"base": "agent/**"}}}), "'agent/**': ** is not a pattern here"),
        (entry(tools={"arguments": {"x": {"base": "agent/../*"}}}), "a glob has no . or .. segment"),
        (entry(tools={"arguments": {"x": {"repo": "a//b"}}}), "a glob has no empty segment"),
        (entry(tools={"arguments": {"x": {"b a": "*"}}}), "an argument name is 1 to 64 letters"),
        (entry(resources=["repo://x/%2e%2e/*"]), "resources[0]: 'repo://x/%2e%2e/*': a glob holds no backslash"),
        (entry(prompts="yes"), "prompts: expected true, false or {allow, deny}, got a string"),
        (entry(prompts={"allow": [], "other": 1}), "prompts.other: unknown key"),
        ({"mcp": {"mcp.example.com": {}}}, "mcp.example.com: 'mcp.example.com'"),
        ({"mcp": {HOST: {}, "*.example.com:443": {}}}, "*.example.com:443: overlaps mcp.example.com:443"),
        (
            {"mcp": {HOST: {}}, "http": {HOST: {"methods": ["GET"]}}},
            "mcp.mcp.example.com:443: overlaps mcp.example.com:443, which another section limits",
        ),
    ],
)
def test_a_malformed_entry_is_refused_naming_its_key(operations: dict[str, Any], message: str) -> None:
    assert message in refusal(operations)


def test_names_are_flat_globs_and_values_must_be_plain() -> None:
    assert name_matches("search_*", "search_code") and name_matches("*", "a/b") and not name_matches("get_*", "Get_x")
    assert name_matches("merge_*", "MERGE_pull", any_case=True)
    assert not name_matches("*a*a*a*b", "a" * 128)  # linear: no backtracking on a hostile name
    for value in ("octo-org/../evil", "octo-org/./x", "a\\b", "a%2Fb", "a%2e%2e", "caf\u00e9", "a\x00b"):
        assert plain_value(value) is not None, value
    assert plain_value("agent/fix-build") is None


def test_argument_globs_decide_the_named_arguments_of_the_tools_they_name() -> None:
    [section] = ops(RULE).mcp
    good = {"repo": "octo-org/widgets", "base": "agent/x/y", "title": "anything at all"}
    assert section.tool_refusal("create_pull_request", good) is None
    assert "argument base main is outside" in str(section.tool_refusal("create_pull_request", {**good, "base": "main"}))
    assert "argument base is missing" in str(section.tool_refusal("create_pull_request", {"repo": "octo-org/w"}))
    assert "is not a string" in str(section.tool_refusal("create_pull_request", {**good, "base": ["agent/x"]}))
    assert ". or .. segment" in str(section.tool_refusal("create_pull_request", {**good, "repo": "octo-org/../x"}))
    assert section.tool_refusal("search_code", {"repo": "anything"}) is None  # no arguments rule for this tool
    assert section.tool_refusal("merge_pull_request", {}) == "tool merge_pull_request matches tools.deny merge_*"
    assert "longer than 128" in str(section.tool_refusal("search_" + "x" * 200, {}))


def test_a_manifest_narrows_the_rule_and_keeps_its_denials_and_argument_rules() -> None:
    asked = ops(
        entry(tools={"allow": ["search_code", "create_pull_request"]}, resources=["repo://octo-org/widgets/*"]),
        ManifestError,
    )
    effective = narrow("r1", ops(RULE), asked)
    section = effective.mcp[0]
    assert section.tools.allow == ("search_code", "create_pull_request")
    assert section.tools.deny == ("delete_*", "merge_*")
    assert section.tool_refusal("create_pull_request", {"repo": "octo-org/w", "base": "main"}) is not None
    assert section.tool_refusal("get_issue", {}) == "tool get_issue is not in tools.allow"
    assert section.resource_refusal("repo://octo-org/docs/README.md") is not None
    assert effective.mcp[1:] == ops(RULE).mcp  # then the rule's own


@pytest.mark.parametrize(
    ("asked", "key"),
    [
        (entry(tools={"allow": ["*"]}), "operations.mcp.mcp.example.com:443.tools.allow[0]: * is not within"),
        (entry(tools={"allow": ["merge_pull_request"]}), "tools.allow[0]: merge_pull_request is not within"),
        (entry(resources=["repo://*"]), "operations.mcp.mcp.example.com:443.resources[0]: repo://* is not within"),
        (entry(prompts=True), "operations.mcp.mcp.example.com:443.prompts.allow[0]: * is not within"),
        ({"http": {HOST: {"methods": ["GET"]}}}, "operations.http.mcp.example.com:443: the rule limits"),
    ],
)
def test_a_manifest_that_widens_is_denied_naming_the_key(asked: dict[str, Any], key: str) -> None:
    with pytest.raises(PolicyDenied) as denied:
        narrow("r1", ops(RULE), ops(asked, ManifestError))
    assert key in denied.value.message
