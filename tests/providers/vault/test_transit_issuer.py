"""``[identity] transit_key``: the issuer's key lives in OpenBao's transit engine and signs there, never on the host.

The tokens verify with the JWKS the broker publishes, made from the public
keys OpenBao gives for each version; ``rotate-key`` makes a new version and
the old one stays published. A key that cannot sign is one line naming the
fix, and nothing is minted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest

from devstack.openbao import transit_key
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.identity import IssuerServer, add_issuer
from tests.fixtures.openbao import OpenBao, add_vault_provider

pytestmark = [pytest.mark.server, pytest.mark.root]
AUDIENCE = "https://api.example.com"
POLICY = f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    grants:
      - provider: identity
        audiences: ["{AUDIENCE}"]
"""
TASK = f"""
version: 1
task: fix-api-1
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
credentials:
  - {{name: api, provider: identity, audience: "{AUDIENCE}"}}
"""


def transit_broker(tmp_path: Path, openbao: OpenBao, key_type: str) -> tuple[BrokerEnv, IssuerServer]:
    env = make_env(tmp_path)
    add_vault_provider(env, openbao)
    server = add_issuer(env, transit_key=transit_key(openbao, key_type))
    env.write_policy(POLICY)
    return env, server


@pytest.fixture
def ecdsa(tmp_path: Path, openbao: OpenBao) -> Iterator[tuple[BrokerEnv, IssuerServer]]:
    env, server = transit_broker(tmp_path, openbao, "ecdsa-p256")
    try:
        yield env, server
    finally:
        server.close()
        env.cleanup()


def token_of(env: BrokerEnv) -> str:
    result = env.run_process("issue", "--task", str(env.write_task(TASK)), "--json")
    assert result.code == 0, result.stderr
    session: str = result.json()["session"]
    return (env.runtime_dir / session / "api" / "token").read_text()


def test_tokens_signed_in_transit_verify_with_the_published_keys(ecdsa: tuple[BrokerEnv, IssuerServer]) -> None:
    env, server = ecdsa
    token = token_of(env)
    assert jwt.get_unverified_header(token)["alg"] == "ES256"
    assert server.verify(token, AUDIENCE)["sub"].startswith("task:fix-api-1:session:s-")
    assert not (env.root / "identity.key").exists()  # no key on the host: it never left OpenBao
    doctor = {c["name"]: c for c in json.loads(env.run_process("doctor", "--json").stdout)["checks"]}
    assert doctor["identity.key"]["ok"] and "version 1 (ES256" in doctor["identity.key"]["detail"]


def test_rotate_key_makes_a_new_version_and_keeps_the_old_one_published(ecdsa: tuple[BrokerEnv, IssuerServer]) -> None:
    env, server = ecdsa
    before = token_of(env)
    rotated = env.run_process("identity", "rotate-key", "--json")
    assert rotated.code == 0, rotated.stderr
    after = token_of(env)
    kids = rotated.json()
    assert [jwt.get_unverified_header(t)["kid"] for t in (before, after)] == [kids["old_kid"], kids["kid"]]
    assert kids["kid"] != kids["old_kid"]
    assert [key.key_id for key in server.jwks().keys] == [kids["kid"], kids["old_kid"]]
    server.verify(before, AUDIENCE)
    server.verify(after, AUDIENCE)


def test_a_transit_key_that_cannot_sign_is_one_line_naming_the_fix(tmp_path: Path, openbao: OpenBao) -> None:
    env, server = transit_broker(tmp_path, openbao, "aes256-gcm96")
    try:
        result = env.run_process("issue", "--task", str(env.write_task(TASK)))
        assert result.code != 0
        line = result.stderr.strip().splitlines()[-1]
        assert "is a aes256-gcm96 key, which cannot sign ES256 or RS256 tokens" in line
        assert "type=ecdsa-p256) and name it in transit_key" in line
        assert "credential.issued" not in env.events()
        doctor = {c["name"]: c for c in json.loads(env.run_process("doctor", "--json").stdout)["checks"]}
        assert not doctor["identity.key"]["ok"] and "cannot sign" in doctor["identity.key"]["detail"]
    finally:
        server.close()
        env.cleanup()
