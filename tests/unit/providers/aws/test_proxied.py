"""What an ``inject: proxy`` AWS credential adds, without a server: the STS actions the proxy re-signs
(``proxy_sts_actions``: none that answers with credentials, one config error naming it), the session
policy's Deny of new credentials within AWS's 2,048 characters, and what the provider hands the core
(``Placeholding``): its files with placeholder keys of the real shapes and the config the proxy needs, and the
real keys for the re-signer."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import botocore.session
import pytest

from broker.egress.injectors.sigv4.actions import answers_with_credentials
from broker.vocab.errors import ConfigError, ProviderError
from broker.vocab.fields import Fields
from broker.vocab.secret import AwsKeys, Secret
from providers.aws.files import CONFIG_LINES, config_file, credentials_file, placeholder_keys
from providers.aws.provider import AwsStsProvider
from providers.aws.session_policy import DENIED
from providers.aws.settings import CREDENTIAL_ACTION
from providers.base import MintedCredential
from providers.capabilities import Placeholding
from tests.fixtures.aws import ACCOUNT, ROLE_ARN
from tests.fixtures.aws_sts import S3_READ, parse
from tests.fixtures.sigv4 import make_keys

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


def test_placeholders_have_the_real_shapes_and_differ_from_the_real_keys() -> None:
    real = make_keys(token_length=412)
    stand_in = placeholder_keys(real)
    assert stand_in.access_key_id.startswith("ASIA") and len(stand_in.access_key_id) == 20
    assert stand_in.access_key_id[4:].isalnum() and stand_in.access_key_id.isupper()
    assert len(stand_in.secret_access_key.reveal()) == 40
    assert stand_in.session_token is not None and len(stand_in.session_token.reveal()) == 412
    assert stand_in.access_key_id != real.access_key_id
    assert stand_in.secret_access_key.reveal() != real.secret_access_key.reveal()


def minted(endpoint: str | None = None, token_length: int = 356) -> MintedCredential:
    """An AWS credential as the provider mints it: its two files, the secret key as its secret."""
    keys = make_keys(token_length)
    assert keys.session_token is not None
    files: dict[str, Secret | str] = {
        "credentials": credentials_file(keys.access_key_id, keys.secret_access_key, keys.session_token),
        "config": config_file("eu-west-1", endpoint),
    }
    return MintedCredential({"access_key_id": keys.access_key_id}, keys.secret_access_key, files, NOW, {})


NOW = datetime(2030, 1, 1, tzinfo=UTC)


def test_the_provider_hands_placeholder_files_and_the_real_keys_for_the_re_signer() -> None:
    provider = configured()
    assert isinstance(provider, Placeholding)
    credential = minted()
    real = provider.proxy_secret(credential)
    held = provider.placeholders(parse({"role_arn": ROLE_ARN}), credential, "https://sts.eu-west-1.amazonaws.com")
    assert held.secret == real and isinstance(held.placeholder, AwsKeys)
    assert real.secret_access_key == credential.secret
    credentials = held.files["credentials"]
    assert isinstance(credentials, Secret)
    text = credentials.reveal()
    assert real.session_token is not None and held.placeholder.session_token is not None
    for value in (real.access_key_id, real.secret_access_key.reveal(), real.session_token.reveal()):
        assert value not in text  # nothing real in what the sandbox gets
    assert text == (
        "[default]\n"
        f"aws_access_key_id = {held.placeholder.access_key_id}\n"
        f"aws_secret_access_key = {held.placeholder.secret_access_key.reveal()}\n"
        f"aws_session_token = {held.placeholder.session_token.reveal()}\n"
    )
    assert held.files["config"] == "[default]\nregion = eu-west-1\n" + "\n".join(CONFIG_LINES) + "\n"


def test_an_endpoint_of_its_own_becomes_the_address_the_proxy_is_reached_at() -> None:
    held = configured().placeholders(
        parse({"role_arn": ROLE_ARN}), minted(endpoint="http://127.0.0.1:5000"), "https://127.0.0.1:8443"
    )
    assert str(held.files["config"]).splitlines()[:3] == [
        "[default]",
        "region = eu-west-1",
        "endpoint_url = https://127.0.0.1:8443",
    ]


def test_a_credential_without_the_keys_the_proxy_stands_in_for_is_a_provider_error() -> None:
    credential = minted()
    broken = MintedCredential(credential.reference, Secret("another"), credential.files, NOW, {})
    with pytest.raises(ProviderError, match="without the keys the proxy stands in for"):
        configured().proxy_secret(broken)
