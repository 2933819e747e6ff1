"""The ``github_app`` provider against the project's GitHub App emulator: the App's key and JWT, minting,
expiry, installation lookup, Enterprise Server paths, refusals, outages and retries, and canary tokens.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from broker.vocab.errors import ConfigError, ProviderError
from broker.vocab.time import iso
from devstack.github_app import GitHubAppEmulator
from devstack.github_state import NOT_ACCESSIBLE, NOT_GRANTED
from providers.base import MintRejected, RevokeOutcome
from providers.github.http import RetryPolicy
from providers.github.provider import GitHubRequest
from tests.fixtures.github import APP_ID, AppKeys, MakeProvider, rsa_key_pair
from tests.fixtures.github_app import ASK, PERMS, build, context, parse, target

# -- the App's key and JWT ---------------------------------------------------------------


def ed25519_pem() -> bytes:
    return ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def encrypted_pem(keys: AppKeys) -> bytes:
    key = serialization.load_pem_private_key(keys.private_pem, password=None)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"),
    )


@pytest.mark.parametrize("case", ["ed25519", "garbage", "mode-0644", "encrypted", "rsa-1024", "missing"])
def test_unfit_private_keys_are_config_errors(
    make_github_provider: MakeProvider, github_app_keys: AppKeys, case: str
) -> None:
    pem, mode, expect = github_app_keys.private_pem, 0o600, ""
    if case == "ed25519":
        pem, expect = ed25519_pem(), "Ed25519 key; GitHub App keys are RSA"
    elif case == "garbage":
        armour = b"RSA " + b"PRIVATE KEY-----"  # split so no scanner mistakes the test for key material
        pem, expect = b"-----BEGIN " + armour + b"\nnot really\n-----END " + armour + b"\n", "not a PEM"
    elif case == "mode-0644":
        mode, expect = 0o644, "readable by others"
    elif case == "encrypted":
        pem, expect = encrypted_pem(github_app_keys), "encrypted"
    elif case == "rsa-1024":
        pem, expect = rsa_key_pair(1024).private_pem, "1024-bit"
    provider = make_github_provider(key_pem=pem, key_mode=mode)
    if case == "missing":
        provider.api.key_file.unlink()
        expect = "not found"
    with pytest.raises(ConfigError) as caught:
        provider.mint(parse(ASK), context())
    message = caught.value.message
    assert message.startswith("providers.github.private_key_file ") and expect in message, message
    assert "\n" not in message and "PRIVATE KEY" not in message


def test_app_jwt_claims_and_cache(make_github_provider: MakeProvider, github_app_keys: AppKeys) -> None:
    now = [1_900_000_000.0]
    provider = make_github_provider()
    provider.api.clock = lambda: now[0]
    token = provider.api.app_jwt()
    assert jwt.get_unverified_header(token.reveal())["alg"] == "RS256"
    claims = jwt.decode(
        token.reveal(),
        github_app_keys.public_pem,
        algorithms=["RS256"],
        options={"verify_exp": False, "verify_iat": False},
    )
    assert claims == {"iat": 1_900_000_000 - 60, "exp": 1_900_000_000 + 540, "iss": str(APP_ID)}
    now[0] += 480  # 60 s left: still reused
    assert provider.api.app_jwt() is token
    now[0] += 1
    assert provider.api.app_jwt() != token


# -- against the emulator ----------------------------------------------------------------


@pytest.mark.server
def test_conformance_mint_check_revoke(make_github_provider: MakeProvider, github_emulator: GitHubAppEmulator) -> None:
    provider = make_github_provider()
    ctx = context()
    credential = provider.mint(parse(ASK), ctx)
    token = credential.secret.reveal()
    installation = github_emulator.state.installations[int(credential.reference["installation_id"])]
    github_end = iso(datetime.fromtimestamp(github_emulator.state.tokens[token].expires_at, UTC))
    assert credential.reference == {
        "installation_id": str(installation.id),
        "owner": "octo-org",
        "token_expires_at": github_end,  # GitHub's own end, for a token whose kept copy is lost
    }
    assert credential.revoke_secret == credential.secret == credential.files["token"]
    assert credential.env == {"GIT_CONFIG_GLOBAL": "/run/secrets/repo/gitconfig"}
    assert credential.scope == parse(ASK).scope()
    assert credential.expires_at <= ctx.session_expires_at
    issued = github_emulator.state.tokens[token]
    assert issued.repositories == ("octo-org/widgets", "octo-org/docs-site")
    assert dict(issued.permissions) == {"contents": "write", "pull_requests": "write", "metadata": "read"}
    assert github_emulator.token_state(token) == "valid"

    [mint] = github_emulator.calls_to("create_token")
    assert mint.body == {
        "repositories": ["widgets", "docs-site"],
        "permissions": {"contents": "write", "pull_requests": "write"},
    }
    assert mint.headers["Accept"] == "application/vnd.github+json"
    assert mint.headers["X-GitHub-Api-Version"] == "2022-11-28"
    assert mint.headers["User-Agent"].startswith("scoped-credential-broker/")

    now = datetime.now(UTC)
    assert provider.revoke(target(credential), now) == RevokeOutcome.REVOKED
    assert github_emulator.token_state(token) == "revoked"
    assert provider.revoke(target(credential), now) == RevokeOutcome.REVOKED
    later = credential.expires_at + timedelta(seconds=1)
    assert provider.revoke(target(credential), later) == RevokeOutcome.EXPIRED


@pytest.mark.server
def test_expiry_is_capped_and_installations_cached(
    make_github_provider: MakeProvider, github_emulator: GitHubAppEmulator
) -> None:
    provider = make_github_provider()
    short = context(ttl=600, session=600)
    assert provider.mint(parse(ASK), short).expires_at == short.session_expires_at
    started = datetime.now(UTC)
    assert provider.mint(parse(ASK), context(ttl=300)).expires_at <= started + timedelta(seconds=301)
    long = provider.mint(parse(ASK), context(ttl=3600, session=7200))
    github_expiry = datetime.fromtimestamp(github_emulator.state.tokens[long.secret.reveal()].expires_at, UTC)
    assert long.expires_at == github_expiry.replace(microsecond=0)
    assert len(github_emulator.calls_to("repo_installation")) == 1
    assert len(github_emulator.calls_to("create_token")) == 3


@pytest.mark.server
def test_installation_lookup_falls_back_to_user(
    make_github_provider: MakeProvider, github_emulator: GitHubAppEmulator
) -> None:
    github_emulator.add_installation("alice", ["dotfiles"], {"contents": "read"}, account_type="User")
    provider = make_github_provider()
    credential = provider.mint(parse({"repositories": ["alice/dotfiles"], "permissions": PERMS}), context())
    assert credential.reference["owner"] == "alice"
    provider = make_github_provider()
    with pytest.raises(ProviderError, match=NOT_ACCESSIBLE) as caught:
        provider.mint(parse({"repositories": ["alice/elsewhere"], "permissions": PERMS}), context())
    assert caught.value.exit_code == 4 and not caught.value.retryable
    routes = [c.route for c in github_emulator.calls][-4:]
    assert routes == ["repo_installation", "org_installation", "user_installation", "create_token"]


@pytest.mark.server
def test_enterprise_server_path_prefix(github_app_keys: AppKeys, tmp_path: Path) -> None:
    with GitHubAppEmulator(app_id=APP_ID, public_key_pem=github_app_keys.public_pem, prefix="/api/v3") as ghes:
        ghes.add_installation("octo-org", ["widgets"], {"contents": "write"})
        key = tmp_path / "app.pem"
        key.write_bytes(github_app_keys.private_pem)
        key.chmod(0o600)
        provider = build({"app_id": APP_ID, "private_key_file": str(key), "api_url": ghes.api_url})
        try:
            ask = {"repositories": ["octo-org/widgets"], "permissions": {"contents": "write"}}
            credential = provider.mint(parse(ask), context())
            assert f'[credential "{ghes.url}"]' in str(credential.files["gitconfig"])
            assert provider.revoke(target(credential), datetime.now(UTC)) == RevokeOutcome.REVOKED
        finally:
            provider.close()
        assert all(c.path.startswith("/") and c.route for c in ghes.calls)


@pytest.mark.server
def test_not_installed_is_a_provider_error(make_github_provider: MakeProvider) -> None:
    with pytest.raises(ProviderError, match="not installed for 'nobody'") as caught:
        make_github_provider().mint(parse({"repositories": ["nobody/thing"], "permissions": PERMS}), context())
    assert not caught.value.retryable


@pytest.mark.server
def test_more_than_the_installation_has_is_refused(
    make_github_provider: MakeProvider, github_emulator: GitHubAppEmulator
) -> None:
    ask = {"repositories": ["octo-org/widgets"], "permissions": {"administration": "write"}}
    with pytest.raises(ProviderError, match=NOT_GRANTED):
        make_github_provider().mint(parse(ask), context())
    assert not github_emulator.state.tokens


@pytest.mark.server
@pytest.mark.parametrize("wider", ["permissions", "repositories"])
def test_a_wider_token_than_asked_is_revoked(
    make_github_provider: MakeProvider, github_emulator: GitHubAppEmulator, wider: str
) -> None:
    """The provider refuses to hand it out and passes it on, so the core can revoke it like any other."""
    github_emulator.state.overgrant = wider
    provider = make_github_provider()
    with pytest.raises(MintRejected, match=f"its {wider} differ from the request") as caught:
        provider.mint(parse(ASK), context())
    [token] = github_emulator.state.tokens
    rejected = caught.value.credential
    assert rejected.secret.reveal() == token and token not in str(caught.value) + repr(rejected)
    assert provider.revoke(target(rejected), datetime.now(UTC)) == RevokeOutcome.REVOKED
    assert github_emulator.token_state(token) == "revoked"


@pytest.mark.server
def test_outage_and_retries(make_github_provider: MakeProvider, github_emulator: GitHubAppEmulator) -> None:
    provider = make_github_provider()
    waits: list[float] = []
    provider.api.sleep = waits.append
    github_emulator.force("create_token", 502, 429, retry_after=1)
    credential = provider.mint(parse(ASK), context())
    assert waits == [0.01, 1.0]
    github_emulator.fail_revocations = True
    with pytest.raises(ProviderError, match="token revoke for repo failed: HTTP 503") as caught:
        provider.revoke(target(credential), datetime.now(UTC))
    assert caught.value.retryable and len(github_emulator.calls_to("revoke_token")) == 3
    assert github_emulator.token_state(credential.secret.reveal()) == "valid"
    github_emulator.fail_revocations = False
    assert provider.revoke(target(credential), datetime.now(UTC)) == RevokeOutcome.REVOKED
    github_emulator.force("create_token", 429, retry_after=3600)  # too long to wait for
    with pytest.raises(ProviderError, match=r"HTTP 429.*\(rate limited\)"):
        provider.mint(parse(ASK), context())


@pytest.mark.server
def test_unreachable_slow_and_wrong_identity(
    make_github_provider: MakeProvider, github_emulator: GitHubAppEmulator
) -> None:
    slow = make_github_provider(timeout=1)
    slow.api.retry = RetryPolicy(attempts=1)
    github_emulator.delays["repo_installation"] = 3
    with pytest.raises(ProviderError, match=r"cannot reach 127\.0\.0\.1:\d+ \(ReadTimeout\)"):
        slow.mint(parse(ASK), context())
    github_emulator.delays.clear()
    with pytest.raises(ProviderError, match=r"HTTP 401: 'Issuer' claim .*check app_id"):
        make_github_provider(app_id="999").mint(parse(ASK), context())
    closed = make_github_provider(api_url="http://127.0.0.1:9")
    with pytest.raises(ProviderError, match="cannot reach 127.0.0.1:9"):
        closed.mint(parse(ASK), context())


@pytest.mark.server
def test_never_mints_a_widening_or_unwritable_token(
    make_github_provider: MakeProvider, github_emulator: GitHubAppEmulator
) -> None:
    provider = make_github_provider()
    for hollow in (
        GitHubRequest(name="repo", provider="github", ttl=None, owner="octo-org", permissions=(("contents", "read"),)),
        GitHubRequest(name="repo", provider="github", ttl=None, owner="octo-org", repositories=("octo-org/widgets",)),
    ):
        with pytest.raises(ProviderError, match="refusing a token without repositories or permissions"):
            provider.mint(hollow, context())
    with pytest.raises(ProviderError, match="credential helper"):
        provider.mint(parse(ASK), context(mount="/run/se crets/repo"))
    assert not github_emulator.calls


@pytest.mark.server
def test_canary_token_never_in_errors_or_reprs(
    make_github_provider: MakeProvider, github_emulator: GitHubAppEmulator, github_app_keys: AppKeys
) -> None:
    provider = make_github_provider()
    credential = provider.mint(parse(ASK), context())
    messages = [repr(credential), str(credential), repr(credential.files), repr(provider.__dict__)]
    github_emulator.fail_revocations = True
    try:
        provider.revoke(target(credential), datetime.now(UTC))
    except ProviderError as exc:
        messages += [str(exc), repr(exc)]
    github_emulator.fail_revocations = False
    github_emulator.state.overgrant = "all"
    try:
        provider.mint(parse(ASK), context())
    except ProviderError as exc:
        messages += [str(exc), repr(exc)]
    assert len(messages) == 8
    secrets = [*github_emulator.state.tokens, github_app_keys.private_pem.decode()]
    secrets += [c.authorization.split(" ", 1)[1] for c in github_emulator.calls if c.authorization]
    for text in messages:
        for secret in secrets:
            assert secret not in text
