"""What an ``inject: proxy`` AWS credential adds, without a server: the STS actions the proxy re-signs
(``proxy_sts_actions``: none that answers with credentials, one config error naming it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import botocore.session
import pytest

from broker.egress.sigv4.actions import answers_with_credentials
from broker.vocab.errors import ConfigError
from broker.vocab.fields import Fields
from providers.aws.provider import CREDENTIAL_ACTION, AwsStsProvider


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
