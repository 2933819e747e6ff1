"""The github_app provider: manifest and grant parsing, config, the App JWT, and a run against the emulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from broker.vocab.errors import ConfigError, ManifestError, PolicyFileError, ProviderError
from broker.vocab.fields import Fields
from broker.vocab.secret import Secret
from broker.vocab.time import iso
from devstack.github_app import GitHubAppEmulator
from devstack.github_state import NOT_ACCESSIBLE, NOT_GRANTED
from providers.base import MintContext, MintedCredential, MintRejected, RevokeOutcome, RevokeTarget
from providers.github.git import GitHost, git_host, gitconfig
from providers.github.http import RetryPolicy
from providers.github.permissions import PERMISSIONS as PERMISSION_TABLE
from providers.github.provider import GitHubAppProvider, GitHubGrant, GitHubRequest
from providers.registry import provider_class
from tests.fixtures.github import (
    APP_ID,
    GITHUB_CONTRACT,
    AppKeys,
    MakeProvider,
    rsa_key_pair,
)

ASK = {
    "repositories": ["octo-org/widgets", "octo-org/docs-site"],
    "permissions": {"contents": "write", "pull_requests": "write"},
}
GRANT = {
    "repositories": ["octo-org/widgets", "octo-org/docs-*"],
    "permissions": {"contents": "write", "pull_requests": "write", "metadata": "read"},
}


def parse(data: dict[str, Any]) -> GitHubRequest:
    fields = Fields(data, "credentials[0]", ManifestError)
    request = GitHubAppProvider.parse_request(fields, name="repo", provider="github", ttl=None)
    fields.done()
    return request


def grant(data: dict[str, Any]) -> GitHubGrant:
    fields = Fields(data, "rules[0].grants[0]", PolicyFileError)
    compiled = GitHubAppProvider.compile_grant(fields, provider="github", max_ttl=None)
    fields.done()
    return compiled


def context(*, ttl: int = 1800, session: int = 1800, mount: str = "/run/secrets/repo") -> MintContext:
    return MintContext(
        session_id="s-test000001",
        task="fix-build-1",
        requester="ci",
        ttl=ttl,
        session_expires_at=datetime.now(UTC) + timedelta(seconds=session),
        mount_dir=PurePosixPath(mount),
    )


def target(credential: MintedCredential, *, secret: bool = True) -> RevokeTarget:
    return RevokeTarget(
        name="repo",
        reference=credential.reference,
        expires_at=credential.expires_at,
        revoke_secret=credential.revoke_secret if secret else None,
    )


# -- manifest requests -------------------------------------------------------------------


def test_parse_valid_request() -> None:
    request = parse(
        {
            "repositories": ["octo-org/widgets", "Octo-Org/docs-site"],
            "permissions": {"issues": "read", "contents": "write"},
        }
    )
    assert request.owner == "octo-org"
    assert request.names() == ["widgets", "docs-site"]
    assert request.permissions == (("contents", "write"), ("issues", "read"))
    assert request.scope() == {
        "repositories": ["octo-org/widgets", "Octo-Org/docs-site"],
        "permissions": {"contents": "write", "issues": "read"},
    }
    assert parse({"repositories": ["o/a.b_c-d"], "permissions": {"workflows": "write"}}).names() == ["a.b_c-d"]
    assert (
        len(parse({"repositories": [f"o/r{i}" for i in range(500)], "permissions": {"contents": "read"}}).repositories)
        == 500
    )


PERMS = {"contents": "read"}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"repositories": ["octo-org/a", "other/b"], "permissions": PERMS}, "repositories[1]"),
        ({"repositories": [f"octo-org/r{i}" for i in range(501)], "permissions": PERMS}, "repositories"),
        ({"repositories": [], "permissions": PERMS}, "repositories"),
        ({"permissions": PERMS}, "repositories"),
        ({"repositories": "octo-org/widgets", "permissions": PERMS}, "repositories"),
        ({"repositories": [42], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["octo-org/.."], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["../etc/passwd"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["octo-org/widgets/../x"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["widgets"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["https://github.com/octo-org/widgets"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["-octo/widgets"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["o" * 40 + "/widgets"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["octo-org/widgets.git"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["octo-org/wid gets"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["octo-org/widgets", "octo-org/Widgets"], "permissions": PERMS}, "repositories[1]"),
        ({"repositories": ["octo-org/widgets"]}, "permissions"),
        ({"repositories": ["octo-org/widgets"], "permissions": {}}, "permissions"),
        ({"repositories": ["octo-org/widgets"], "permissions": ["contents"]}, "permissions"),
        (
            {"repositories": ["octo-org/widgets"], "permissions": {"pull-requests": "write"}},
            "permissions.pull-requests",
        ),
        ({"repositories": ["octo-org/widgets"], "permissions": {"workflows": "read"}}, "permissions.workflows"),
        ({"repositories": ["octo-org/widgets"], "permissions": {"contents": "admin"}}, "permissions.contents"),
        ({"repositories": ["octo-org/widgets"], "permissions": {"contents": "none"}}, "permissions.contents"),
        ({"repositories": ["octo-org/widgets"], "permissions": {"contents": True}}, "permissions.contents"),
        ({"repositories": ["octo-org/widgets"], "permissions": {1: "read"}}, "permissions"),
        ({"repositories": ["octo-org/widgets"], "permissions": PERMS, "repository_ids": [1]}, "repository_ids"),
    ],
)
def test_parse_refuses_bad_requests(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ManifestError) as caught:
        parse(data)
    assert caught.value.message.startswith(f"credentials[0].{field}:"), caught.value.message
    assert "\n" not in caught.value.message


# -- policy grants -----------------------------------------------------------------------


def test_grant_covers_and_names_what_falls_outside() -> None:
    compiled = grant(GRANT)
    assert compiled.check(parse(ASK)) == []
    assert compiled.check(parse({"repositories": ["Octo-Org/Docs-Site"], "permissions": {"metadata": "read"}})) == []
    reasons = compiled.check(
        parse(
            {
                "repositories": ["octo-org/widgets", "octo-org/secret-infra", "octo-org/docs"],
                "permissions": {"contents": "write", "issues": "write", "metadata": "write"},
            }
        )
    )
    assert reasons == [
        "repository 'octo-org/secret-infra' is not granted",
        "repository 'octo-org/docs' is not granted",
        "permission issues: write is not granted",
        "permission metadata: write is above the granted read",
    ]


def test_grant_levels_and_globs() -> None:
    projects = grant({"repositories": ["octo-*/*"], "permissions": {"repository_projects": "write"}})
    ask = {"repositories": ["octo-org/anything"], "permissions": {"repository_projects": "admin"}}
    assert projects.check(parse(ask)) == ["permission repository_projects: admin is above the granted write"]
    ask["permissions"] = {"repository_projects": "read"}
    assert projects.check(parse(ask)) == []
    assert (
        grant({"repositories": ["octo-org/w?dgets"], "permissions": PERMS}).check(
            parse({"repositories": ["octo-org/widgets"], "permissions": PERMS})
        )
        == []
    )
    other_owner = parse({"repositories": ["octo-orgx/widgets"], "permissions": PERMS})
    assert grant({"repositories": ["octo-org/*"], "permissions": PERMS}).check(other_owner)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"repositories": ["octo-org"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["octo-org/a/b"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["*"], "permissions": PERMS}, "repositories[0]"),
        ({"repositories": ["octo-org/*"], "permissions": {"contents": "owner"}}, "permissions.contents"),
        ({"repositories": ["octo-org/*"], "permissions": {"typo": "read"}}, "permissions.typo"),
        ({"repositories": ["octo-org/*"]}, "permissions"),
    ],
)
def test_grant_compile_refuses(data: dict[str, Any], field: str) -> None:
    with pytest.raises(PolicyFileError, match=rf"^rules\[0\]\.grants\[0\]\.{re_escape(field)}:"):
        grant(data)


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_permission_table_equals_the_contract() -> None:
    schema = json.loads(GITHUB_CONTRACT.read_text(encoding="utf-8"))["components"]["schemas"]["app-permissions"][
        "properties"
    ]
    assert dict(PERMISSION_TABLE) == {name: tuple(p["enum"]) for name, p in schema.items()}
    assert len(PERMISSION_TABLE) == 55


# -- configuration -----------------------------------------------------------------------


def build(table: dict[str, Any], config_dir: Path = Path("/etc/broker")) -> GitHubAppProvider:
    fields = Fields({"private_key_file": "app.pem", **table}, "providers.github", ConfigError)
    return GitHubAppProvider.from_config("github", fields, config_dir)


def test_config() -> None:
    assert provider_class("github_app") is GitHubAppProvider
    provider = build({"app_id": 123456})
    assert provider.app_id == "123456" and provider.api_url == "https://api.github.com"
    assert provider.api.key_file == Path("/etc/broker/app.pem")
    assert build({"app_id": "123456", "api_url": "https://ghe.example.com/api/v3/"}).api_url == (
        "https://ghe.example.com/api/v3"
    )
    assert provider.max_ttl == 3600 and provider.min_ttl == 1
    assert (provider.name, provider.type_name) == ("github", "github_app")


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({}, "app_id"),
        ({"app_id": "abc"}, "app_id"),
        ({"app_id": True}, "app_id"),
        ({"app_id": 0}, "app_id"),
        ({"app_id": 1.5}, "app_id"),
        ({"app_id": 1, "api_url": "http://api.example.com"}, "api_url"),
        ({"app_id": 1, "api_url": "https://user:pw@api.example.com"}, "api_url"),
        ({"app_id": 1, "api_url": "https://api.example.com/?x=1"}, "api_url"),
        ({"app_id": 1, "api_url": "ftp://api.example.com"}, "api_url"),
        ({"app_id": 1, "timeout": 0}, "timeout"),
    ],
)
def test_config_refuses(table: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^providers\.github\.{field}:"):
        build(table)


def test_config_loading_stays_cheap() -> None:
    """Building the provider neither imports requests/jwt/cryptography nor touches the key or network."""
    code = (
        "import sys, pathlib\n"
        "from broker.vocab.errors import ConfigError\nfrom broker.vocab.fields import Fields\n"
        "from providers.registry import provider_class\n"
        "cls = provider_class('github_app')\n"
        "f = Fields({'app_id': '1', 'private_key_file': '/nonexistent.pem'}, 'p', ConfigError)\n"
        "cls.from_config('github', f, pathlib.Path('/'))\n"
        "print(sorted(m for m in ('requests', 'jwt', 'cryptography') if m in sys.modules))\n"
    )
    root = Path(__file__).resolve().parents[4]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("api_url", "host"),
    [
        ("https://api.github.com", GitHost("https", "github.com")),
        ("https://ghe.example.com/api/v3", GitHost("https", "ghe.example.com")),
        ("https://ghe.example.com:8443/api/v3", GitHost("https", "ghe.example.com:8443")),
        ("https://api.octo.ghe.com", GitHost("https", "octo.ghe.com")),
        ("http://127.0.0.1:8765", GitHost("http", "127.0.0.1:8765")),
    ],
)
def test_git_host(api_url: str, host: GitHost) -> None:
    assert git_host(api_url) == host


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


def test_revoke_without_the_token_is_not_retryable() -> None:
    provider = build({"app_id": 1})
    lost = RevokeTarget(name="repo", reference={"installation_id": "1", "owner": "o"}, expires_at=None)
    with pytest.raises(ProviderError, match="no token kept for repo") as caught:
        provider.revoke(lost, datetime.now(UTC))
    assert not caught.value.retryable


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


# -- the git config ----------------------------------------------------------------------


def git_fill(
    gitconfig_path: Path, home: Path, url: str, system: Path | None = None
) -> subprocess.CompletedProcess[str]:
    protocol, host = url.split("://")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_GLOBAL": str(gitconfig_path),
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "",
        "SSH_ASKPASS": "",
    }
    if system is None:
        env["GIT_CONFIG_NOSYSTEM"] = "1"
    else:
        env["GIT_CONFIG_SYSTEM"] = str(system)
    stdin = f"protocol={protocol}\nhost={host}\npath=octo-org/widgets.git\n\n"
    return subprocess.run(
        ["git", "credential", "fill"], input=stdin, env=env, capture_output=True, text=True, timeout=30
    )


def write_credential(credential: MintedCredential, directory: Path) -> None:
    directory.mkdir(parents=True)
    for name, content in credential.files.items():
        text = content.reveal() if isinstance(content, Secret) else content
        (directory / name).write_text(text)


@pytest.mark.server
@pytest.mark.skipif(not Path("/usr/bin/git").exists(), reason="git is not installed")
def test_git_credential_fill_yields_the_token(
    make_github_provider: MakeProvider, github_emulator: GitHubAppEmulator, tmp_path: Path
) -> None:
    mount = tmp_path / "secrets" / "repo"
    credential = make_github_provider().mint(parse(ASK), context(mount=str(mount)))
    write_credential(credential, mount)
    home = tmp_path / "home"
    home.mkdir()
    result = git_fill(mount / "gitconfig", home, github_emulator.url)
    assert result.returncode == 0, result.stderr
    assert "username=x-access-token\n" in result.stdout
    assert f"password={credential.secret.reveal()}\n" in result.stdout
    assert credential.secret.reveal() not in (mount / "gitconfig").read_text()
    elsewhere = git_fill(mount / "gitconfig", home, "https://gitlab.com")
    assert elsewhere.returncode != 0 and credential.secret.reveal() not in elsewhere.stdout


@pytest.mark.skipif(not Path("/usr/bin/git").exists(), reason="git is not installed")
def test_git_config_for_github_com_overrides_system_helpers(tmp_path: Path) -> None:
    mount = tmp_path / "run secrets'x" / "repo"  # a path that needs shell quoting
    mount.mkdir(parents=True)
    (mount / "token").write_text("ghs_canaryTOKEN123")
    with pytest.raises(ValueError, match="credential helper"):
        gitconfig(GitHost("https", "github.com"), PurePosixPath(mount / "token"))
    mount = tmp_path / "secrets" / "repo"
    mount.mkdir(parents=True)
    (mount / "token").write_text("ghs_canaryTOKEN123")
    (mount / "gitconfig").write_text(gitconfig(git_host("https://api.github.com"), PurePosixPath(mount / "token")))
    system = tmp_path / "system-gitconfig"
    system.write_text('[credential]\n\thelper = "!f() { echo username=sys; echo password=from-system; }; f"\n')
    result = git_fill(mount / "gitconfig", tmp_path, "https://github.com", system=system)
    assert result.returncode == 0, result.stderr
    assert "password=ghs_canaryTOKEN123\n" in result.stdout and "from-system" not in result.stdout
