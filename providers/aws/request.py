"""What a manifest may ask of ``aws_sts`` and what a policy grant allows: parsing and the coverage check.

A request names one role, optionally narrows it with an inline session policy
and managed ``policy_arns``. A grant lists role globs, the actions (and
optionally resources) a session policy may Allow, and the managed policies a
request may attach. Without any session policy the credentials carry the
role's full permissions, so such a request is covered only when the grant
allows every action (``"*"``) on every resource. Managed policies the grant
names are trusted as the operator's choice: ``policy_arns`` alone count as a
session policy, since AWS then intersects the role with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from broker.vocab.durations import format_duration
from broker.vocab.fields import Fields, shown
from broker.vocab.globs import any_match, glob_within
from providers.aws.session_policy import (
    ACTION,
    RESOURCE,
    SessionPolicy,
    bucket_names,
    parse_session_policy,
    refused,
    sent_policy,
    variables_as_wildcards,
    widening,
)
from providers.base import CredentialRequest, Grant

AWS_MIN_TTL = 900
AWS_MAX_TTL = 43_200
#: Plain-text limit of Policy and PolicyArns together in AssumeRole.
SESSION_POLICY_CHARS = 2048
MAX_POLICY_ARNS = 10
_NAME = r"[\w+=,.@-]"
ROLE_ARN = re.compile(rf"arn:(aws[a-z-]*):iam::([0-9]{{12}}):role/(?:{_NAME}+/)*({_NAME}{{1,64}})", re.ASCII)
POLICY_ARN = re.compile(rf"arn:(aws[a-z-]*):iam::([0-9]{{12}}):policy/(?:{_NAME}+/)*{_NAME}{{1,128}}", re.ASCII)
ARN_GLOB = re.compile(r"\*|arn:[\w+=,.@:/*?-]{1,2044}", re.ASCII)


@dataclass(frozen=True)
class AwsStsRequest(CredentialRequest):
    role_arn: str = ""
    session_policy: SessionPolicy | None = None
    policy_arns: tuple[str, ...] = ()

    @property
    def role_name(self) -> str:
        return self.role_arn.rsplit("/", 1)[-1]

    @property
    def policy_json(self) -> str:
        """The compact session policy of the manifest, or "" without one."""
        return self.session_policy.to_json() if self.session_policy is not None else ""

    def sent_policy_json(self, proxied: bool) -> str:
        """The inline session policy AWS receives: the manifest's, and for ``proxied`` keys the Deny of new
        credentials (``session_policy.sent_policy``); "" for none."""
        return sent_policy(self.session_policy, self.policy_arns, proxied)

    def proxy_refusal(self) -> str | None:
        """A proxied credential's session policy carries the Deny of new credentials: refused when, with it, the
        policies are over AWS's 2,048 characters."""
        size = len(self.sent_policy_json(True)) + sum(len(arn) for arn in self.policy_arns)
        if size <= SESSION_POLICY_CHARS:
            return None
        return (
            f"with inject: proxy the session policy carries a Deny of new credentials, and with it is {size}"
            f" characters as compact JSON (with policy_arns); AWS allows {SESSION_POLICY_CHARS}: shorten it"
        )

    def more_proxy_hosts(self, hosts: tuple[str, ...]) -> tuple[str, ...]:
        """``BUCKET.`` + each S3 host of ``hosts`` (``s3.REGION.amazonaws.com:443``) for every bucket the session
        policy allows something on: where a client using virtual-hosted addressing sends (``bucket_names``)."""
        if self.session_policy is None:
            return ()
        s3_hosts = [host for host in hosts if host.startswith("s3.")]
        return tuple(f"{bucket}.{host}" for bucket in bucket_names(self.session_policy) for host in s3_hosts)

    def scope(self) -> dict[str, Any]:
        return {
            "role_arn": self.role_arn,
            "session_policy": self.session_policy.document() if self.session_policy else None,
            "policy_arns": list(self.policy_arns),
        }


def parse_aws_request(fields: Fields, *, name: str, provider: str, ttl: int | None) -> AwsStsRequest:
    if ttl is not None and ttl < AWS_MIN_TTL:
        raise fields.fail("ttl", f"{format_duration(ttl)} is below the AWS minimum of 15m")
    role_arn = fields.req_string(
        "role_arn",
        pattern=ROLE_ARN,
        max_len=2048,
        hint="arn:aws:iam::<12-digit account>:role/[path/]name",
    )
    role = ROLE_ARN.fullmatch(role_arn)
    assert role is not None
    policy_fields = fields.mapping("session_policy", required=False)
    session_policy = parse_session_policy(policy_fields) if policy_fields is not None else None
    policy_arns = (
        fields.string_list(
            "policy_arns",
            required=False,
            pattern=POLICY_ARN,
            max_items=MAX_POLICY_ARNS,
            max_len=2048,
            hint="arn:aws:iam::<12-digit account>:policy/[path/]name",
        )
        or ()
    )
    for index, arn in enumerate(policy_arns):
        policy = POLICY_ARN.fullmatch(arn)
        assert policy is not None
        if policy.group(1, 2) != role.group(1, 2):
            raise fields.fail(f"policy_arns[{index}]", "must be in the same partition and account as role_arn")
    size = len(session_policy.to_json() if session_policy else "") + sum(len(arn) for arn in policy_arns)
    if size > SESSION_POLICY_CHARS:
        raise fields.fail(
            "session_policy" if session_policy else "policy_arns",
            f"is {size} characters as compact JSON (with policy_arns); AWS allows {SESSION_POLICY_CHARS}",
        )
    return AwsStsRequest(
        name=name,
        provider=provider,
        ttl=ttl,
        role_arn=role_arn,
        session_policy=session_policy,
        policy_arns=policy_arns,
    )


@dataclass(frozen=True)
class AwsStsGrant(Grant[AwsStsRequest]):
    roles: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    resources: tuple[str, ...] | None = None
    require_session_policy: bool = False
    policy_arns: tuple[str, ...] = ()

    def check(self, request: AwsStsRequest) -> list[str]:
        reasons: list[str] = []
        if not any_match(self.roles, request.role_arn, cross_slash=True):
            reasons.append(f"role {request.role_arn} is not granted")
        reasons.extend(
            f"policy_arns[{i}] {arn} is not granted"
            for i, arn in enumerate(request.policy_arns)
            if not any_match(self.policy_arns, arn, cross_slash=True)
        )
        if request.session_policy is None and not request.policy_arns:
            if self.require_session_policy:
                reasons.append("the grant requires a session_policy")
            elif "*" not in self.actions:
                reasons.append("no session_policy: the role's full permissions exceed the grant's actions")
            elif self.resources is not None and "*" not in self.resources:
                reasons.append("no session_policy: the role's full permissions exceed the grant's resources")
            return reasons
        if request.session_policy is not None:
            reasons.extend(self._check_statements(request.session_policy))
        return reasons

    def _check_statements(self, policy: SessionPolicy) -> list[str]:
        reasons: list[str] = []
        for index, statement in enumerate(policy.statements):
            where = f"session_policy.Statement[{index}]"
            if statement.not_actions:
                reasons.append(f"{where}: NotAction is refused: list the allowed actions under Action")
            if statement.not_resources:
                reasons.append(f"{where}: NotResource is refused: list the resources under Resource")
            if statement.effect != "Allow":
                continue  # a Deny only narrows
            for action in statement.actions:
                if not any(glob_within(action, g, ignore_case=True) for g in self.actions):
                    reasons.append(f"{where}: action {action} is outside the grant's actions")
            if self.resources is None:
                continue
            for resource in statement.resources:
                wanted = variables_as_wildcards(resource)
                if not any(glob_within(wanted, g) for g in self.resources):
                    reasons.append(f"{where}: resource {shown(resource, 120)} is outside the grant's resources")
        return reasons


def compile_aws_grant(fields: Fields, *, provider: str, max_ttl: int | None) -> AwsStsGrant:
    roles = fields.string_list("roles", pattern=ARN_GLOB, max_items=100, max_len=2048, hint="a role ARN glob")
    actions = fields.string_list(
        "actions",
        pattern=ACTION,
        max_items=500,
        max_len=200,
        hint="'*' or service:Action, * and ? as wildcards",
    )
    resources = fields.string_list(
        "resources", required=False, pattern=RESOURCE, max_items=500, max_len=2048, hint="'*' or an ARN glob"
    )
    require = fields.boolean("require_session_policy", False)
    policy_arns = fields.string_list(
        "policy_arns", required=False, pattern=ARN_GLOB, max_items=100, max_len=2048, hint="a policy ARN glob"
    )
    assert roles is not None and actions is not None
    return AwsStsGrant(
        provider=provider,
        max_ttl=max_ttl,
        roles=roles,
        actions=actions,
        resources=resources,
        require_session_policy=require,
        policy_arns=policy_arns or (),
    )


def aws_narrower(child: AwsStsRequest, parent: AwsStsRequest) -> list[str]:
    """Why ``child`` may do more than ``parent`` (delegation's Narrowing), each reason naming the widening key.

    STS credentials carry the role's permissions intersected with the session policies (the inline one and the
    managed ``policy_arns``): a child is at most as wide as its parent when it assumes the same role with managed
    policies among the parent's and an inline policy within the parent's (``session_policy.widening``). A parent
    limited by ``policy_arns`` alone (whose contents the broker does not read) covers only children limited by a
    subset of them."""
    if child.role_arn != parent.role_arn:
        return [f"role_arn: {child.role_arn} is not the parent's role {parent.role_arn}"]
    reasons = [
        f"policy_arns[{index}]: {arn} is not one of the parent's policy_arns"
        for index, arn in enumerate(child.policy_arns)
        if arn not in parent.policy_arns
    ]
    if child.session_policy is not None:
        reasons += refused(child.session_policy)
    if parent.session_policy is None and not parent.policy_arns:
        return reasons  # the parent holds the role's full permissions: any session policy narrows them
    if child.session_policy is None:
        if not child.policy_arns:
            reasons.append("session_policy: none, so the role's full permissions, wider than the parent's")
        return reasons
    if parent.session_policy is None:
        reasons.append("session_policy: the parent is limited by its policy_arns alone; name a subset of them instead")
        return reasons
    return reasons + widening(child.session_policy, parent.session_policy)
