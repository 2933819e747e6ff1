"""The issuer's tokens (``broker.core.identity.issuer``) read back as a verifier reads them: by the JWKS alone."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

import jwt
import pytest

from broker.core.identity.issuer import Issuer
from broker.core.identity.keys import FileKeyRing
from broker.core.inputs.identity import IdentityConfig
from broker.vocab.errors import ProviderError
from providers.base import MintContext
from providers.capabilities import MAX_TOKEN_LIFETIME, SignedToken

ISSUER = "https://broker.example.com"
NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


class Log:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        self.records.append({"event": event, **fields})
        return self.records[-1]


def make_issuer(tmp_path: Path, clock: Clock, algorithm: str = "ES256", log: Log | None = None) -> Issuer:
    settings = IdentityConfig(ISSUER, tmp_path / "keys" / "identity.key", algorithm)
    ring = FileKeyRing(settings.signing_key_file, algorithm)
    return Issuer(settings, "host-1", ring, log, "root", clock)  # type: ignore[arg-type]


def context(*, ends_in: int = 7200, parent: str | None = None) -> MintContext:
    return MintContext(
        session_id="s-abcdefghijkl",
        task="fix-build-7",
        requester="alice",
        ttl=900,
        session_expires_at=NOW + timedelta(seconds=ends_in),
        mount_dir=PurePosixPath("/run/secrets/api"),
        rule="agents",
        sandbox_uid=1000,
        parent=parent,
    )


def verified(issuer: Issuer, token: SignedToken, audience: str, at: datetime = NOW) -> dict[str, Any]:
    """The claims, checked with the published JWKS only (the key named by ``kid``), at time ``at``."""
    value = token.token.reveal()
    key = jwt.PyJWKSet.from_dict(issuer.public_keys())[jwt.get_unverified_header(value)["kid"]]
    claims: dict[str, Any] = jwt.decode(
        value,
        key.key,
        algorithms=[key.algorithm_name],
        audience=audience,
        issuer=ISSUER,
        options={"verify_exp": False, "verify_iat": False},
    )
    assert claims["iat"] <= at.timestamp() < claims["exp"]
    return claims


@pytest.mark.parametrize("algorithm", ["ES256", "RS256"])
def test_a_session_token_names_its_session_and_verifies_with_the_jwks(tmp_path: Path, algorithm: str) -> None:
    issuer = make_issuer(tmp_path, Clock(), algorithm)
    token = issuer.session_token(context(), "https://api.example.com", 900, purpose="credential")
    claims = verified(issuer, token, "https://api.example.com")
    assert claims["sub"] == "task:fix-build-7:session:s-abcdefghijkl" == token.subject
    assert claims["exp"] - claims["iat"] == 900
    assert {k: claims[k] for k in ("task", "session", "rule", "requester", "sandbox_uid")} == {
        "task": "fix-build-7",
        "session": "s-abcdefghijkl",
        "rule": "agents",
        "requester": "alice",
        "sandbox_uid": 1000,
    }
    assert "parent" not in claims and claims["jti"] == token.jti
    assert jwt.get_unverified_header(token.token.reveal())["alg"] == algorithm


def test_a_child_names_its_parent(tmp_path: Path) -> None:
    issuer = make_issuer(tmp_path, Clock())
    token = issuer.session_token(context(parent="s-parent000001"), "aud", 900, purpose="credential")
    assert verified(issuer, token, "aud")["parent"] == "s-parent000001"


def test_no_token_lives_past_an_hour_nor_past_its_session(tmp_path: Path) -> None:
    issuer = make_issuer(tmp_path, Clock())
    long = issuer.session_token(context(), "aud", 10 * 3600, purpose="credential")
    assert long.expires_at - NOW == timedelta(seconds=MAX_TOKEN_LIFETIME)
    short = issuer.session_token(context(ends_in=120), "aud", 900, purpose="credential")
    assert short.expires_at == NOW + timedelta(seconds=120)
    with pytest.raises(ProviderError, match="its session has ended"):
        issuer.session_token(context(ends_in=0), "aud", 900, purpose="credential")


def test_a_provider_cannot_set_a_claim_of_the_issuer(tmp_path: Path) -> None:
    issuer = make_issuer(tmp_path, Clock())
    with pytest.raises(ProviderError, match="'sub'"):
        issuer.session_token(context(), "aud", 900, purpose="x", claims={"sub": "task:prod:session:s-x"})
    extra = issuer.session_token(
        context(), "aud", 900, purpose="x", claims={"https://aws.amazon.com/source_identity": "s"}
    )
    assert verified(issuer, extra, "aud")["https://aws.amazon.com/source_identity"] == "s"


def test_each_token_but_a_credential_is_a_log_record_of_its_jti_never_the_token(tmp_path: Path) -> None:
    log = Log()
    issuer = make_issuer(tmp_path, Clock(), log=log)
    credential = issuer.session_token(context(), "aud", 900, purpose="credential")
    login = issuer.broker_token("vault", 300, purpose="vault login")
    assert [r["jti"] for r in log.records] == [login.jti]  # the credential is logged as credential.issued
    assert log.records[0]["subject"] == "broker:host-1" and log.records[0]["purpose"] == "vault login"
    assert credential.token.reveal() not in str(log.records) and login.token.reveal() not in str(log.records)


def test_the_key_is_made_once_private(tmp_path: Path) -> None:
    issuer = make_issuer(tmp_path, Clock())
    issuer.broker_token("aud", 60, purpose="x")
    path = tmp_path / "keys" / "identity.key"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    kid = issuer.public_keys()["keys"][0]["kid"]
    again = make_issuer(tmp_path, Clock())  # another process: the same key
    assert again.public_keys()["keys"][0]["kid"] == kid


def test_a_rotated_key_stays_published_until_its_last_token_ends(tmp_path: Path) -> None:
    clock = Clock()
    issuer = make_issuer(tmp_path, clock)
    before = issuer.session_token(context(), "aud", 3600, purpose="credential")
    old, new = issuer.rotate()
    after = issuer.session_token(context(), "aud", 3600, purpose="credential")
    assert jwt.get_unverified_header(after.token.reveal())["kid"] == new != old
    assert [key["kid"] for key in issuer.public_keys()["keys"]] == [new, old]
    verified(issuer, before, "aud")  # the old token still verifies from the JWKS
    clock.now = before.expires_at + timedelta(seconds=61)
    assert [key["kid"] for key in issuer.public_keys()["keys"]] == [new]


def test_a_rotation_by_another_process_reaches_a_running_issuer(tmp_path: Path) -> None:
    running = make_issuer(tmp_path, Clock())
    first = running.broker_token("aud", 60, purpose="x").kid
    _, new = make_issuer(tmp_path, Clock()).rotate()  # broker identity rotate-key, elsewhere
    assert running.broker_token("aud", 60, purpose="x").kid == new != first


def test_a_key_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    issuer = make_issuer(tmp_path, Clock())
    issuer.broker_token("aud", 60, purpose="x")
    (tmp_path / "keys" / "identity.key").chmod(0o644)
    with pytest.raises(Exception, match="chmod 600"):
        make_issuer(tmp_path, Clock()).broker_token("aud", 60, purpose="x")
