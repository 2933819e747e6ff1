"""``auth = "jwt"``: the broker logs in to OpenBao with a token of its own issuer, and holds no Vault token file.

OpenBao's jwt auth method verifies for real: it fetches the broker's JWKS
from ``jwks_url`` (the issuer's documents served over HTTP as a listener
serves them), checks the signature, ``bound_issuer``, the role's
``bound_subject`` (``broker:HOST``) and ``bound_audiences``, and the times.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from broker.core.broker import Broker
from broker.core.inputs.config import load_config
from broker.vocab.errors import ProviderError
from devstack.openbao import jwt_auth
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.identity import IssuerServer, add_issuer
from tests.fixtures.openbao import VAULT_TASK, OpenBao

pytestmark = [pytest.mark.server, pytest.mark.root]
SUBJECT = f"broker:{socket.gethostname()}"


@dataclass
class JwtBroker:
    env: BrokerEnv
    server: IssuerServer
    mount: str


@pytest.fixture
def jwt_broker(tmp_path: Path, openbao: OpenBao) -> Iterator[JwtBroker]:
    env = make_env(tmp_path)
    server = add_issuer(env)
    mount, role = jwt_auth(openbao, server.url, jwks_url=server.url + "/.well-known/jwks.json", subject=SUBJECT)
    env.add_provider(
        "vault",
        {
            "type": "vault",
            "addr": openbao.addr,
            "auth": "jwt",
            "jwt_role": role,
            "jwt_mount": mount,
            "token_role": "broker-session",
        },
    )
    try:
        yield JwtBroker(env, server, mount)
    finally:
        server.close()
        env.cleanup()


def test_the_broker_logs_in_with_its_own_token_and_issues_with_no_token_file(
    jwt_broker: JwtBroker, openbao: OpenBao
) -> None:
    env = jwt_broker.env
    assert not list(env.root.glob("*token*"))  # no Vault token anywhere in the broker's files
    result = env.run_process("issue", "--task", str(env.write_task(VAULT_TASK)), "--json")
    assert result.code == 0, result.stderr
    minted = next(r for r in env.log_records() if r["event"] == "credential.issued")
    assert openbao.lookup(minted["reference"]["accessor"])["policies"] == ["ci-read"]
    login = next(r for r in env.log_records() if r["event"] == "identity.token")
    assert (login["subject"], login["audience"], login["purpose"]) == (SUBJECT, "vault", "vault vault login")
    assert "/.well-known/jwks.json" in jwt_broker.server.requests  # OpenBao fetched the keys itself


def test_doctor_compares_the_keys_vault_verifies_with_and_logs_in(jwt_broker: JwtBroker) -> None:
    result = jwt_broker.env.run_process("doctor", "--json")
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["providers.vault.login"]["ok"], checks["providers.vault.login"]
    assert checks["providers.vault.jwt.keys"]["ok"], checks["providers.vault.jwt.keys"]
    assert "holds the signing key" in checks["providers.vault.jwt.keys"]["detail"]
    assert checks["providers.vault.jwt.issuer"]["ok"]
    assert checks["identity.key"]["ok"]


def test_a_rotated_key_is_fetched_by_vault_at_the_next_login(jwt_broker: JwtBroker) -> None:
    env = jwt_broker.env
    assert env.run_process("issue", "--task", str(env.write_task(VAULT_TASK))).code == 0
    assert env.run_process("identity", "rotate-key").code == 0
    again = env.run_process("issue", "--task", str(env.write_task(VAULT_TASK)))
    assert again.code == 0, again.stderr  # OpenBao finds the new kid in the JWKS it fetches again


def test_a_key_vault_does_not_hold_is_refused_with_what_to_check(tmp_path: Path, openbao: OpenBao) -> None:
    env = make_env(tmp_path)
    server = add_issuer(env)
    try:
        other = ec.generate_private_key(ec.SECP256R1()).public_key()
        pem = other.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()
        mount, role = jwt_auth(openbao, server.url, pubkeys=[pem], subject=SUBJECT)
        env.add_provider("vault", {"type": "vault", "addr": openbao.addr, "auth": "jwt", "jwt_role": role,
                                   "jwt_mount": mount, "token_role": "broker-session"})  # fmt: skip
        result = env.run_process("issue", "--task", str(env.write_task(VAULT_TASK)))
        assert result.code == 4
        assert f"vault vault: jwt login as role {role} at auth/{mount} failed" in result.stderr
        assert "credential.issued" not in env.events()
        doctor = {c["name"]: c for c in json.loads(env.run_process("doctor", "--json").stdout)["checks"]}
        assert not doctor["providers.vault.login"]["ok"]
        assert "verifies with the broker's keys (broker identity jwks)" in doctor["providers.vault.login"]["fix"]
    finally:
        server.close()
        env.cleanup()


def test_a_clock_vault_refuses_is_named_with_the_fix(jwt_broker: JwtBroker) -> None:
    """The broker's clock ten minutes ahead of Vault's: its token is issued in the future, and Vault says so."""
    broker = Broker.open(load_config(jwt_broker.env.config_path))
    try:
        assert broker.issuer is not None
        ahead = broker.clock() + timedelta(minutes=10)
        broker.issuer.clock = lambda: ahead
        vault = broker.config.providers["vault"].vault  # type: ignore[attr-defined]
        with pytest.raises(ProviderError) as refused:
            vault.client()
        message = refused.value.message
        assert "jwt login refused for the token's time" in message
        assert "synchronise this host's clock (chrony, systemd-timesyncd)" in message and "\n" not in message
    finally:
        broker.close()


def test_an_issuer_that_is_not_https_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    env.tables["identity"] = {"issuer": "http://broker.example.com"}
    env.write_config()
    result = env.run_process("issue", "--task", str(env.write_task(VAULT_TASK)))
    assert result.code == 2
    assert result.stderr.strip() == (
        "broker: error: identity.issuer: 'http://broker.example.com' is not https; verifiers fetch the issuer's keys"
        " from it, so use https://... (plain http only for 127.0.0.0/8, ::1 or localhost)"
    )
