"""The broker's issuer trusted at AWS instead of its key: what an operator does for ``web_identity = true``.

As docs/identity.md says: the issuer an IAM OIDC provider whose client id is
STS's audience; a role for sessions (``agent-web``, S3) trusting it with a
condition on each token's ``sub`` (the stack's fix and review tasks); and the
broker's own role (``broker-web``: what its IAM calls are made as) trusting
the broker's own subject. moto checks none of it; ``devstack.identity.aws_front``
does, in front of it, and ``web_identity_decisions`` reads what it decided.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Sequence
from typing import Any

from devstack.aws import ACCOUNT

WEB_ROLE = "agent-web"
WEB_ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/{WEB_ROLE}"
BROKER_ROLE = "broker-web"
BROKER_ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/{BROKER_ROLE}"
AUDIENCE = "sts.amazonaws.com"
#: The sessions ``agent-web`` trusts: the stack's fix and review tasks.
WEB_SUBJECTS = ["task:fix-*:session:s-*", "task:review-*:session:s-*"]
DECISIONS = "/devstack-api/web-identity"


def _allow(actions: list[str]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]})


def trust_issuer(iam: Any, issuer: str, broker_subject: str | None, deny_actions: Sequence[str]) -> None:
    """``issuer`` an OIDC provider; ``agent-web`` for its sessions; ``broker-web`` for ``broker_subject`` (reading
    roles and writing their deny policies: ``deny_actions``)."""
    provider_url = issuer.split("://", 1)[1]
    iam.create_open_id_connect_provider(Url=issuer, ClientIDList=[AUDIENCE], ThumbprintList=["0" * 40])
    provider_arn = f"arn:aws:iam::{ACCOUNT}:oidc-provider/{provider_url}"

    def trusting(subjects: list[str]) -> str:
        condition = {
            "StringEquals": {f"{provider_url}:aud": AUDIENCE},
            "StringLike": {f"{provider_url}:sub": subjects},
        }
        statement = {
            "Effect": "Allow",
            "Principal": {"Federated": provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": condition,
        }
        return json.dumps({"Version": "2012-10-17", "Statement": [statement]})

    iam.create_role(RoleName=WEB_ROLE, AssumeRolePolicyDocument=trusting(WEB_SUBJECTS), MaxSessionDuration=3600)
    iam.put_role_policy(RoleName=WEB_ROLE, PolicyName="work", PolicyDocument=_allow(["s3:*", "sts:GetCallerIdentity"]))
    if broker_subject is not None:
        iam.create_role(RoleName=BROKER_ROLE, AssumeRolePolicyDocument=trusting([broker_subject]))
        actions = ["iam:GetRole", "sts:GetCallerIdentity", *deny_actions]
        iam.put_role_policy(RoleName=BROKER_ROLE, PolicyName="broker", PolicyDocument=_allow(actions))


def web_identity_decisions(moto_url: str) -> list[dict[str, Any]]:
    """What the web identity front of the moto at ``moto_url`` decided, in order."""
    with urllib.request.urlopen(f"{moto_url}{DECISIONS}", timeout=10) as response:
        found: list[dict[str, Any]] = json.loads(response.read())
    return found
