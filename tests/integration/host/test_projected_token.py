"""A session token in its file is renewed while ``broker exec`` runs, like a projected service-account token.

The command reads ``/run/secrets/api/token`` in bubblewrap, waits past four
fifths of the token's life, and reads the same path again: the second token
is a new one (its own ``jti``, a later ``exp``), both verify with the
issuer's published keys, both name the same session, and the log records the
renewal; the old one was not listed as revoked (it ends by itself), and the
session's revocation at the end lists the live one.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest

from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.identity import IssuerServer, add_issuer
from tests.fixtures.sandbox import sandbox_unavailable

pytestmark = [pytest.mark.root, pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable()))]

AUDIENCE = "https://api.example.com"
TASK = f"""
version: 1
task: fix-long-1
ttl: 5m
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
credentials:
  - name: api
    provider: identity
    audience: "{AUDIENCE}"
    ttl: 10s
"""
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
#: Read, wait past 8 s of the token's 10 (it is renewed at 4/5), read again.
INSIDE = "cat /run/secrets/api/token; echo; sleep 11; cat /run/secrets/api/token; echo"


@pytest.fixture
def issuer(tmp_path: Path) -> Iterator[tuple[BrokerEnv, IssuerServer]]:
    env = make_env(tmp_path)
    server = add_issuer(env)
    env.write_policy(POLICY)
    try:
        yield env, server
    finally:
        server.close()
        env.cleanup()


def test_the_token_file_is_renewed_in_place_while_the_command_runs(issuer: tuple[BrokerEnv, IssuerServer]) -> None:
    env, server = issuer
    task = env.write_task(TASK)
    result = env.run_process("exec", "--task", str(task), "--sandbox", "bwrap", "--", "sh", "-c", INSIDE, timeout=120)
    assert result.code == 0, result.stderr
    first, second = result.stdout.split()
    assert first != second
    claims = [jwt.decode(token, options={"verify_signature": False}) for token in (first, second)]
    assert claims[0]["jti"] != claims[1]["jti"] and claims[1]["exp"] > claims[0]["exp"]
    assert claims[0]["sub"] == claims[1]["sub"] and claims[0]["session"] == claims[1]["session"]
    for token in (first, second):  # both signed by the issuer, as a verifier sees them
        header = jwt.get_unverified_header(token)
        key = server.jwks()[header["kid"]]
        jwt.decode(token, key.key, algorithms=[header["alg"]], audience=AUDIENCE, options={"verify_exp": False})
    records = env.log_records()
    renewed = [r for r in records if r["event"] == "credential.renewed"]
    assert renewed and renewed[0]["credential"] == "api"
    issued = [r["reference"]["jti"] for r in records if r["event"] == "credential.issued"]
    assert issued[:2] == [claims[0]["jti"], claims[1]["jti"]]
    assert first not in json.dumps(records) and second not in json.dumps(records)
    with urllib.request.urlopen(server.url + "/.well-known/revoked", timeout=10) as answer:
        listed = {entry["jti"] for entry in json.loads(answer.read())["revoked"]}
    assert claims[1]["jti"] in listed  # the session is revoked now: its live token is listed
