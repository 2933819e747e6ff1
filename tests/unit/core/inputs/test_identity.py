"""``[identity]`` and the keys that need it: an issuer URL verifiers can trust, one key, one line per mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.core.inputs.config import Config, load_config
from broker.vocab.errors import ConfigError

BASE = 'state_dir = "s"\nruntime_dir = "/run/b"\npolicy_dir = "p"\naudit_key = "keys/audit.key"\n'
VAULT = '[providers.vault]\ntype = "vault"\naddr = "http://127.0.0.1:8200"\ntoken_file = "t"\n'
AWS = '[providers.aws]\ntype = "aws_sts"\nregion = "us-east-1"\n'
EXCHANGE = (
    '[providers.modelx]\ntype = "token_exchange"\ntoken_endpoint = "https://auth.model.example/oauth/token"\n'
    'audience = "https://api.model.example"\nproxy_hosts = ["api.model.example:443"]\n'
)


def load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "broker.toml"
    path.write_text(BASE + text)
    return load_config(path)


def test_an_issuer_alone_makes_an_identity_instance_with_a_key_beside_the_audit_key(tmp_path: Path) -> None:
    config = load(tmp_path, '[identity]\nissuer = "https://broker.example.com/"\n')
    assert config.identity is not None
    assert config.identity.issuer == "https://broker.example.com"
    assert config.identity.signing_key_file == tmp_path / "keys" / "identity.key"
    assert config.identity.algorithm == "ES256"
    assert config.providers["identity"].type_name == "identity"


@pytest.mark.parametrize("issuer", ["http://127.0.0.1:8443", "http://localhost", "https://b.example.com/tenant"])
def test_https_issuers_and_loopback_http_ones_are_taken(tmp_path: Path, issuer: str) -> None:
    assert load(tmp_path, f'[identity]\nissuer = "{issuer}"\n').identity is not None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            '[identity]\nissuer = "http://broker.example.com"\n',
            "identity.issuer: 'http://broker.example.com' is not https; verifiers fetch the issuer's keys from it,"
            " so use https://... (plain http only for 127.0.0.0/8, ::1 or localhost)",
        ),
        ('[identity]\nissuer = "ftp://broker.example.com"\n', "is not an https URL"),
        ('[identity]\nissuer = "https://broker.example.com/?tenant=a"\n', "must be scheme://host[:port][/path]"),
        ('[identity]\nissuer = "https://u:p@broker.example.com"\n', "must be scheme://host[:port][/path]"),
        ('[identity]\nissuer = "https://b.example.com"\nalgorithm = "HS256"\n', "algorithm: must be one of"),
        ('[identity]\nissuer = "https://b.example.com"\ntransit_mount = "t"\n', "transit_mount: only with transit_key"),
        (
            '[identity]\nissuer = "https://b.example.com"\ntransit_key = "k"\nsigning_key_file = "f"\n' + VAULT,
            "signing_key_file: not with transit_key",
        ),
        ('[identity]\nissuer = "https://b.example.com"\ntransit_key = "k"\n', "name the vault instance"),
        (
            '[identity]\nissuer = "https://b.example.com"\ntransit_key = "k"\ntransit_vault = "aws"\n' + AWS,
            "identity.transit_vault: 'aws' is not a vault instance",
        ),
        (AWS + 'web_identity = true\nrevoke = "expire"\n', "providers.aws.web_identity: needs [identity] issuer"),
        (EXCHANGE, "providers.modelx.type: needs [identity] issuer"),
        (
            '[providers.v]\ntype = "vault"\naddr = "http://127.0.0.1:8200"\nauth = "jwt"\njwt_role = "b"\n',
            "providers.v.auth: needs [identity] issuer",
        ),
        (
            '[identity]\nissuer = "https://b.example.com"\n' + AWS + "web_identity = true\n",
            'providers.aws.broker_role_arn: web_identity with revoke = "deny-policy" needs the role',
        ),
        (
            '[identity]\nissuer = "https://b.example.com"\n'
            + AWS
            + 'web_identity = true\nrevoke = "expire"\nprofile = "p"\n',
            "providers.aws.profile: not with web_identity = true",
        ),
        (AWS + 'broker_role_arn = "arn:aws:iam::123456789012:role/b"\n', "broker_role_arn: only with web_identity"),
        (
            '[identity]\nissuer = "https://b.example.com"\n'
            '[providers.v]\ntype = "vault"\naddr = "http://127.0.0.1:8200"\nauth = "jwt"\njwt_role = "b"\n'
            'token_file = "t"\n',
            'auth = "jwt" logs in with the broker\'s own token: no token or AppRole file',
        ),
        (
            '[identity]\nissuer = "https://b.example.com"\ntransit_key = "k"\n'
            '[providers.v]\ntype = "vault"\naddr = "http://127.0.0.1:8200"\nauth = "jwt"\njwt_role = "b"\n',
            "providers.v logs in with the issuer's own tokens, so it cannot hold the issuer's key",
        ),
        (
            '[identity]\nissuer = "https://b.example.com"\n' + EXCHANGE.replace("https://auth", "http://auth"),
            "providers.modelx.token_endpoint: must use https://",
        ),
    ],
)
def test_a_mistake_is_one_line_naming_the_key_and_the_fix(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, text)
    assert fragment in raised.value.message
    assert "\n" not in raised.value.message


def test_a_transit_key_is_held_by_the_one_vault_instance(tmp_path: Path) -> None:
    config = load(tmp_path, '[identity]\nissuer = "https://b.example.com"\ntransit_key = "issuer"\n' + VAULT)
    assert config.identity is not None
    assert (config.identity.transit_vault, config.identity.transit_mount) == ("vault", "transit")
