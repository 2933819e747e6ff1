"""What an ``inject: proxy`` AWS credential adds, without a server: the STS actions the proxy re-signs
(``proxy_sts_actions``: none that answers with credentials, one config error naming it), and the session
policy's Deny of new credentials within AWS's 2,048 characters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import botocore.session
import pytest

from broker.egress.injectors.sigv4.actions import answers_with_credentials
from broker.vocab.errors import ConfigError
from broker.vocab.fields import Fields
from providers.aws.provider import CREDENTIAL_ACTION, AwsStsProvider
from providers.aws.session_policy import DENIED
from tests.fixtures.aws import ACCOUNT, ROLE_ARN
from tests.fixtures.aws_sts import S3_READ, parse

ARN = f"arn:aws:iam::{ACCOUNT}:policy/p"


def configured(**table: Any) -> AwsStsProvider:
    fields = Fields({"type": "aws_sts", "region": "eu-west-1", **table}, "providers.aws", ConfigError)
    fields.raw("type")
    provider = AwsStsProvider.from_config("aws", fields, Path("/etc/broker"))
    fields.done()
    return provider


def test_the_proxy_re_signs_get_caller_identity_unless_the_operator_lists_others() -> None:
    assert configured().proxy_actions() == {"sts": frozenset({"GetCallerIdentity"})}
    listed = configured(proxy_sts_actions=["GetCallerIdentity", "DecodeAuthorizationMessage"])
    assert listed.proxy_actions() == {"sts": frozenset({"GetCallerIdentity", "DecodeAuthorizationMessage"})}
    assert configured(proxy_sts_actions=[]).proxy_actions() == {"sts": frozenset()}


@pytest.mark.parametrize(
    "action", ["AssumeRole", "AssumeRoleWithWebIdentity", "GetSessionToken", "GetWebIdentityToken"]
)
def test_listing_an_action_that_answers_with_credentials_is_a_one_line_config_error(action: str) -> None:
    with pytest.raises(ConfigError) as error:
        configured(proxy_sts_actions=["GetCallerIdentity", action])
    assert error.value.message == (
        f"providers.aws.proxy_sts_actions[1]: {action} answers with new credentials; the proxy never re-signs it"
    )


def test_the_config_and_the_proxy_agree_on_every_sts_action() -> None:
    model = botocore.session.get_session().get_service_model("sts")
    for action in model.operation_names:
        assert bool(CREDENTIAL_ACTION.fullmatch(action)) == answers_with_credentials(action), action


def deny(policy: str) -> list[dict[str, Any]]:
    return [s for s in json.loads(policy)["Statement"] if s["Effect"] == "Deny"]


def test_a_proxied_credentials_session_policy_denies_new_credentials_beside_what_it_allows() -> None:
    narrowed = parse({"role_arn": ROLE_ARN, "session_policy": S3_READ})
    assert narrowed.sent_policy_json(False) == narrowed.policy_json  # inject: file: as the manifest says
    sent = json.loads(narrowed.sent_policy_json(True))
    assert sent["Statement"][:-1] == json.loads(narrowed.policy_json)["Statement"]
    assert sent["Statement"][-1] == {"Effect": "Deny", "Action": list(DENIED), "Resource": "*"}
    assert {"sts:AssumeRole*", "sts:GetFederationToken", "sts:GetSessionToken"} <= set(DENIED)
    whole = parse({"role_arn": ROLE_ARN})  # no session policy: the role's permissions, less minting
    assert whole.sent_policy_json(False) == ""
    assert [s["Effect"] for s in json.loads(whole.sent_policy_json(True))["Statement"]] == ["Allow", "Deny"]
    managed = parse({"role_arn": ROLE_ARN, "policy_arns": [ARN]})  # the managed policies keep the allowing
    assert [s["Effect"] for s in json.loads(managed.sent_policy_json(True))["Statement"]] == ["Deny"]


def test_a_session_policy_leaving_no_room_for_the_deny_is_refused_with_inject_proxy() -> None:
    statements = [
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::bucket-{n:03d}/*"} for n in range(22)
    ]
    request = parse({"role_arn": ROLE_ARN, "session_policy": {"Version": "2012-10-17", "Statement": statements}})
    assert len(request.policy_json) <= 2048 < len(request.sent_policy_json(True))
    refusal = request.proxy_refusal()
    assert refusal is not None and refusal.startswith("with inject: proxy the session policy carries a Deny")
    assert "AWS allows 2048" in refusal
    assert parse({"role_arn": ROLE_ARN, "session_policy": S3_READ}).proxy_refusal() is None
