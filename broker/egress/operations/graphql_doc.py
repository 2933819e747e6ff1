"""GraphQL requests to a ``github_api`` host: queries pass, every mutation field must be listed, approvals checked.

The document is parsed with graphql-core (a well-kept parser, never a regular
expression), bounded in length and tokens. Every operation in it is checked,
whichever one ``operationName`` selects: a mutation hidden in a second
operation is found. A mutation's top-level fields are collected through inline
fragments and fragment spreads (a fragment on ``Mutation`` spreads its fields
into the mutation), by field name: an alias changes nothing. ``__typename``
is allowed; every other field must be in ``graphql_mutations``.
Subscriptions, documents with type definitions, unknown or repeated
fragments, and requests that are not one JSON object with a ``query`` string
(a persisted query names a document the broker cannot see) are refused.

With ``reviews: {approve: false}``, ``addPullRequestReview`` and
``submitPullRequestReview`` are refused when their arguments, with the
request's variables (or their defaults) filled in, give an ``event`` of
``APPROVE``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from graphql import GraphQLError
from graphql.language import (
    BooleanValueNode,
    DocumentNode,
    EnumValueNode,
    FieldNode,
    FloatValueNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    IntValueNode,
    ListValueNode,
    ObjectValueNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    StringValueNode,
    ValueNode,
    VariableNode,
    parse,
)

from broker.egress.operations.decision import clipped
from broker.egress.operations.model import APPROVE

MAX_DOCUMENT = 256 * 1024
MAX_TOKENS = 50_000
MAX_CACHED = 16 * 1024
REVIEW_MUTATIONS = frozenset({"addPullRequestReview", "submitPullRequestReview"})
META_FIELDS = frozenset({"__typename"})


class GraphqlRefused(Exception):
    """Why a GraphQL request is refused (one line)."""


def check_request(request: object, mutations: frozenset[str], approve: bool) -> str | None:
    """``None`` when the GraphQL request (the parsed JSON body) passes, else the reason it does not."""
    try:
        _check_request(request, mutations, approve)
    except GraphqlRefused as exc:
        return str(exc)
    except RecursionError:
        return "a GraphQL document nested too deeply"
    return None


def _check_request(request: object, mutations: frozenset[str], approve: bool) -> None:
    if not isinstance(request, dict):
        raise GraphqlRefused("a GraphQL request is one JSON object")
    query = request.get("query")
    if not isinstance(query, str):
        raise GraphqlRefused("a GraphQL request without a query string (persisted queries are not supported)")
    variables = request.get("variables") or {}
    if not isinstance(variables, dict):
        raise GraphqlRefused("GraphQL variables that are not an object")
    if not isinstance(request.get("operationName") or "", str):
        raise GraphqlRefused("an operationName that is not a string")
    if len(query) > MAX_DOCUMENT:
        raise GraphqlRefused(f"a GraphQL document longer than {MAX_DOCUMENT} characters")
    try:
        document = _parsed(query) if len(query) <= MAX_CACHED else _parse(query)
    except GraphQLError as exc:
        raise GraphqlRefused(f"not a GraphQL document ({clipped(exc.message, 120)})") from None
    except RecursionError:
        raise GraphqlRefused("a GraphQL document nested too deeply") from None
    fragments: dict[str, FragmentDefinitionNode] = {}
    operations: list[OperationDefinitionNode] = []
    for definition in document.definitions:
        if isinstance(definition, FragmentDefinitionNode):
            if definition.name.value in fragments:
                raise GraphqlRefused(f"fragment {definition.name.value} is defined twice")
            fragments[definition.name.value] = definition
        elif isinstance(definition, OperationDefinitionNode):
            operations.append(definition)
        else:
            raise GraphqlRefused("a GraphQL document holding type definitions, not operations")
    if not operations:
        raise GraphqlRefused("a GraphQL document without an operation")
    for operation in operations:
        if operation.operation is OperationType.SUBSCRIPTION:
            raise GraphqlRefused("GraphQL subscriptions are refused")
        if operation.operation is OperationType.MUTATION:
            _check_mutation(operation, fragments, variables, mutations, approve)


def _parse(query: str) -> DocumentNode:
    return parse(query, no_location=True, max_tokens=MAX_TOKENS)


#: Clients send the same few documents again and again (with other variables): the parsed ones are kept,
#: up to 256 of at most 16 KiB each. The document depends on the text alone; the checks run on every request.
_parsed = lru_cache(maxsize=256)(_parse)


def _check_mutation(
    operation: OperationDefinitionNode,
    fragments: Mapping[str, FragmentDefinitionNode],
    variables: Mapping[str, object],
    mutations: frozenset[str],
    approve: bool,
) -> None:
    name = operation.name.value if operation.name else "(anonymous)"
    for field in _top_level_fields(operation.selection_set, fragments, set()):
        field_name = field.name.value
        if field_name in META_FIELDS:
            continue
        if field_name not in mutations:
            raise GraphqlRefused(f"mutation {field_name} (in operation {name}) is not in graphql_mutations")
        if not approve and field_name in REVIEW_MUTATIONS:
            arguments = {a.name.value: _value(a.value, operation, variables) for a in field.arguments or ()}
            if _approves(arguments):
                raise GraphqlRefused(f"{field_name} with event APPROVE: reviews.approve is false")


def _top_level_fields(
    selections: SelectionSetNode, fragments: Mapping[str, FragmentDefinitionNode], spread: set[str]
) -> list[FieldNode]:
    fields: list[FieldNode] = []
    for selection in selections.selections:
        if isinstance(selection, FieldNode):
            fields.append(selection)
        elif isinstance(selection, InlineFragmentNode):
            fields.extend(_top_level_fields(selection.selection_set, fragments, spread))
        elif isinstance(selection, FragmentSpreadNode):
            target = selection.name.value
            if target not in fragments:
                raise GraphqlRefused(f"fragment {target} is not defined")
            if target in spread:
                continue  # already collected (a cycle is invalid GraphQL; the server refuses it)
            spread.add(target)
            fields.extend(_top_level_fields(fragments[target].selection_set, fragments, spread))
        else:
            raise GraphqlRefused("a selection the broker does not know")
    return fields


def _value(node: ValueNode, operation: OperationDefinitionNode, variables: Mapping[str, object]) -> object:
    """An argument's value with the request's variables (or their defaults) filled in."""
    if isinstance(node, VariableNode):
        name = node.name.value
        if name in variables:
            return variables[name]
        for definition in operation.variable_definitions or ():
            if definition.variable.name.value == name and definition.default_value is not None:
                return _value(definition.default_value, operation, variables)
        return None
    if isinstance(node, ObjectValueNode):
        return {f.name.value: _value(f.value, operation, variables) for f in node.fields}
    if isinstance(node, ListValueNode):
        return [_value(v, operation, variables) for v in node.values]
    if isinstance(node, EnumValueNode | StringValueNode | IntValueNode | FloatValueNode | BooleanValueNode):
        return node.value
    return None  # NullValueNode


def _approves(value: object) -> bool:
    """Whether an ``event`` of ``APPROVE`` appears anywhere in the arguments."""
    if isinstance(value, dict):
        return any(
            (key == "event" and isinstance(item, str) and item.strip().upper() == APPROVE) or _approves(item)
            for key, item in value.items()
        )
    if isinstance(value, list):
        return any(_approves(item) for item in value)
    return False
