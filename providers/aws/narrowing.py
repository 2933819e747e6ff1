"""Whether an AWS STS request is covered by another: the same role, and a session policy contained in the parent's.

STS credentials carry the role's permissions intersected with the session
policies (the inline one and the managed ``policy_arns``), so a child is at
most as wide as its parent when it assumes the same role with managed
policies among the parent's and an inline policy whose every Allow lies
within the parent's inline policy: each action and resource of each child
statement within one parent Allow statement (wildcard containment, as the
grant check does), under at least the parent statement's conditions; every
Deny of the parent kept; no ``NotAction`` or ``NotResource``. A parent
limited by ``policy_arns`` alone (whose contents the broker does not read)
covers only children limited by a subset of them. A resource with a policy
variable is taken as a wildcard in a child and covers nothing in a parent
(its value differs from session to session).
"""

from __future__ import annotations

import json

from broker.vocab.fields import shown
from broker.vocab.globs import glob_within
from providers.aws.request import AwsStsRequest
from providers.aws.session_policy import POLICY_VARIABLE, SessionPolicy, Statement, variables_as_wildcards


def aws_narrower(child: AwsStsRequest, parent: AwsStsRequest) -> list[str]:
    """Why ``child`` may do more than ``parent``, each reason naming the widening key."""
    if child.role_arn != parent.role_arn:
        return [f"role_arn: {child.role_arn} is not the parent's role {parent.role_arn}"]
    reasons = [
        f"policy_arns[{index}]: {arn} is not one of the parent's policy_arns"
        for index, arn in enumerate(child.policy_arns)
        if arn not in parent.policy_arns
    ]
    if child.session_policy is not None:
        reasons += _refused(child.session_policy)
    if parent.session_policy is None and not parent.policy_arns:
        return reasons  # the parent holds the role's full permissions: any session policy narrows them
    if child.session_policy is None:
        if not child.policy_arns:
            reasons.append("session_policy: none, so the role's full permissions, wider than the parent's")
        return reasons
    if parent.session_policy is None:
        reasons.append("session_policy: the parent is limited by its policy_arns alone; name a subset of them instead")
        return reasons
    return reasons + _contained(child.session_policy, parent.session_policy)


def _refused(policy: SessionPolicy) -> list[str]:
    reasons = []
    for index, statement in enumerate(policy.statements):
        if statement.not_actions:
            reasons.append(f"session_policy.Statement[{index}]: NotAction is refused")
        if statement.not_resources:
            reasons.append(f"session_policy.Statement[{index}]: NotResource is refused")
    return reasons


def _contained(child: SessionPolicy, parent: SessionPolicy) -> list[str]:
    reasons = []
    kept = [statement.document() for statement in child.statements]
    for index, statement in enumerate(parent.statements):
        if statement.effect == "Deny" and statement.document() not in kept:
            reasons.append(f"session_policy: the parent's Deny statement [{index}] is missing")
    allows = [s for s in parent.statements if s.effect == "Allow" and not s.not_actions and not s.not_resources]
    for index, statement in enumerate(child.statements):
        if statement.effect != "Allow" or statement.not_actions or statement.not_resources:
            continue  # a Deny only narrows; NotAction/NotResource are refused above
        for action in statement.actions:
            for resource in statement.resources:
                if not any(_covers(parent_statement, statement, action, resource) for parent_statement in allows):
                    reasons.append(
                        f"session_policy.Statement[{index}]: {action} on {shown(resource, 120)} is outside the"
                        " parent's session policy"
                    )
    return reasons


def _covers(parent: Statement, child: Statement, action: str, resource: str) -> bool:
    if not any(glob_within(action, granted, ignore_case=True) for granted in parent.actions):
        return False
    wanted = variables_as_wildcards(resource)
    if not any(not POLICY_VARIABLE.search(granted) and glob_within(wanted, granted) for granted in parent.resources):
        return False
    return _conditions_kept(parent.condition_json, child.condition_json)


def _conditions_kept(parent: str | None, child: str | None) -> bool:
    """Every condition of the parent's statement is in the child's, with the same values (more only narrows)."""
    if parent is None:
        return True
    if child is None:
        return False
    wanted, given = json.loads(parent), json.loads(child)
    return all(
        operator in given and all(given[operator].get(key) == value for key, value in keys.items())
        for operator, keys in wanted.items()
    )
