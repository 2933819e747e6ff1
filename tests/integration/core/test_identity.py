"""The broker as an issuer, from its command line: session tokens a verifier checks with the published keys alone.

The verifier's side is what any service trusting the issuer does: fetch the
JWKS over HTTP (the issuer's documents served as a listener serves them,
``tests.fixtures.identity``), check the signature by ``kid``, the issuer, the
audience and the times. The broker runs as a process (``broker issue``,
``revoke``, ``identity ...``).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.identity import IssuerServer, add_issuer

pytestmark = pytest.mark.root  # the session directories are tmpfs mounts

AUDIENCE = "https://api.example.com"
POLICY = f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    max_ttl: 2h
    grants:
      - provider: identity
        audiences: ["{AUDIENCE}"]
"""


def task(audience: str = AUDIENCE, name: str = "fix-api-1") -> str:
    return f"""
version: 1
task: {name}
ttl: 90m
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
credentials:
  - name: api
    provider: identity
    audience: "{audience}"
"""


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


def issued(env: BrokerEnv, text: str) -> tuple[str, str]:
    """The session id and its token, as the sandbox reads it (``NAME/token`` in the session directory)."""
    result = env.run_process("issue", "--task", str(env.write_task(text)), "--json")
    assert result.code == 0, result.stderr
    session = result.json()["session"]
    return session, (env.runtime_dir / session / "api" / "token").read_text()


def fetched(server: IssuerServer, path: str) -> Any:
    with urllib.request.urlopen(server.url + path, timeout=10) as answer:
        return json.loads(answer.read())


def test_a_session_token_verifies_with_the_published_keys_and_names_its_session(
    issuer: tuple[BrokerEnv, IssuerServer],
) -> None:
    env, server = issuer
    session, token = issued(env, task())
    claims = server.verify(token, AUDIENCE)  # the JWKS over HTTP, the kid, iss, aud, exp, iat
    assert claims["sub"] == f"task:fix-api-1:session:{session}"
    assert {k: claims[k] for k in ("task", "session", "rule", "sandbox_uid")} == {
        "task": "fix-api-1",
        "session": session,
        "rule": "agents",
        "sandbox_uid": 1000,
    }
    assert claims["requester"] == "root" and "parent" not in claims
    assert claims["exp"] - claims["iat"] <= 3600  # within an hour, though the session lasts 90 minutes
    stored = env.run_process("status", "--json").json()[0]
    assert claims["exp"] <= datetime.fromisoformat(stored["expires_at"].replace("Z", "+00:00")).timestamp()
    records = env.log_records()
    minted = [r for r in records if r["event"] == "credential.issued"]
    assert [r["reference"]["jti"] for r in minted] == [claims["jti"]]  # every token is a record: its jti
    assert token not in json.dumps(records)  # never the token
    discovery = fetched(server, "/.well-known/openid-configuration")
    assert discovery["issuer"] == server.url and discovery["jwks_uri"] == server.url + "/.well-known/jwks.json"


def test_an_audience_no_grant_lists_is_refused_with_exit_3_and_nothing_minted(
    issuer: tuple[BrokerEnv, IssuerServer],
) -> None:
    env, _ = issuer
    result = env.run_process("issue", "--task", str(env.write_task(task("https://evil.example.com"))))
    assert result.code == 3
    assert "audience 'https://evil.example.com' is not one the grant lists" in result.stderr
    assert result.stderr.count("\n") == 1
    assert "credential.issued" not in env.events()
    assert env.session_dirs() == []


def test_a_revoked_sessions_tokens_are_listed_until_they_end(issuer: tuple[BrokerEnv, IssuerServer]) -> None:
    env, server = issuer
    kept, kept_token = issued(env, task())
    gone, gone_token = issued(env, task(name="fix-api-2"))
    assert fetched(server, "/.well-known/revoked")["revoked"] == []
    assert env.run_process("revoke", "--session", gone).code == 0
    listed = fetched(server, "/.well-known/revoked")["revoked"]
    gone_jti = jwt.decode(gone_token, options={"verify_signature": False})["jti"]
    assert [entry["jti"] for entry in listed] == [gone_jti]
    assert listed[0]["exp"] == jwt.decode(gone_token, options={"verify_signature": False})["exp"]
    assert kept_token and kept  # the live session's token is not listed
    printed = env.run_process("identity", "revoked")
    assert printed.code == 0 and [e["jti"] for e in json.loads(printed.stdout)["revoked"]] == [gone_jti]


def test_a_rotated_key_stays_published_until_its_last_token_ends(issuer: tuple[BrokerEnv, IssuerServer]) -> None:
    env, server = issuer
    _, before = issued(env, task())
    rotated = env.run_process("identity", "rotate-key", "--json")
    assert rotated.code == 0, rotated.stderr
    kids = rotated.json()
    _, after = issued(env, task(name="fix-api-2"))
    assert jwt.get_unverified_header(before)["kid"] == kids["old_kid"]
    assert jwt.get_unverified_header(after)["kid"] == kids["kid"] != kids["old_kid"]
    published = [key["kid"] for key in fetched(server, "/.well-known/jwks.json")["keys"]]
    assert published == [kids["kid"], kids["old_kid"]]
    server.verify(before, AUDIENCE)  # a token signed before the rotation still checks
    server.verify(after, AUDIENCE)
    assert (
        json.loads(env.run_process("identity", "jwks").stdout)["keys"]
        == fetched(server, "/.well-known/jwks.json")["keys"]
    )
    assert "identity.key_rotated" in env.events()


def test_a_broker_without_an_issuer_says_how_to_be_one(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    result = env.run_process("identity", "jwks")
    assert result.code == 2
    assert result.stderr.strip() == (
        'broker: error: this broker is no issuer: set [identity] issuer = "https://..." in its config'
    )
