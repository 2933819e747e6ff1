"""How the canary tests look for secrets: canaries to plant, the secrets every provider minted (captured at
``Provider.mint`` itself), and scans of command output and of files for them, or for anything shaped like a
Vault token.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from broker.vocab.secret import Secret
from providers.aws.provider import AwsStsProvider
from providers.base import MintContext, MintedCredential, Provider
from providers.github.provider import GitHubAppProvider
from providers.vault.provider import VaultProvider
from tests.fixtures.aws import BROKER_SECRET
from tests.fixtures.brokerenv import BrokerEnv, Result
from tests.fixtures.github import AppKeys

#: Global option sets every path is run with (the broker's diagnostics are where secrets would slip out).
FLAG_SETS: list[list[str]] = [[], ["--debug"], ["--verbose"], ["--debug", "--verbose", "--log-format", "json"]]
#: Token-shaped strings of OpenBao/Vault: none may appear in any output.
VAULT_TOKEN_SHAPE = re.compile(r"\b(?:hv[sbr]|[sbr])\.[A-Za-z0-9_-]{20,}")


def canary(label: str) -> str:
    return f"CANARY-{label}-{secrets.token_hex(12)}"


def files_under(*roots: Path) -> Iterable[Path]:
    for root in roots:
        if root.is_file():
            yield root
        elif root.is_dir():
            yield from (p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def assert_nowhere(needles: Iterable[str], results: list[Result], *roots: Path) -> None:
    """No needle in any result's stdout/stderr, nor in any file below ``roots``."""
    needles = [n for n in needles if n]
    assert needles
    found: list[str] = []
    for result in results:
        for needle in needles:
            if needle in result.stdout or needle in result.stderr:
                found.append(f"{needle[:12]}... in the output of a command exiting {result.code}")
    for path in files_under(*roots):
        data = path.read_bytes()
        found += [f"{n[:12]}... in {path}" for n in needles if n.encode() in data]
    assert found == []


def assert_no_vault_token_shapes(results: list[Result], *roots: Path) -> None:
    for result in results:
        assert not VAULT_TOKEN_SHAPE.search(result.stdout + result.stderr), result.stdout + result.stderr
    for path in files_under(*roots):
        assert not VAULT_TOKEN_SHAPE.search(path.read_bytes().decode("utf-8", "replace")), path


def secret_values(credential: MintedCredential) -> set[str]:
    """Every secret string a minted credential carries (file contents split into their secret values)."""
    values = {credential.secret.reveal()}
    if credential.revoke_secret is not None:
        values.add(credential.revoke_secret.reveal())
    public = set(credential.reference.values())
    for content in credential.files.values():
        if not isinstance(content, Secret):
            continue
        text = content.reveal()
        assigned = [line.split("=", 1)[1].strip() for line in text.splitlines() if "=" in line]
        values.update(v for v in (assigned or [text.strip()]) if v and v not in public)
    return values


@pytest.fixture
def minted(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The secrets every provider minted in this test (in-process runs), captured at ``Provider.mint``."""
    captured: set[str] = set()

    def spy(cls: type[Provider[Any]]) -> None:
        original = cls.mint

        def mint(self: Provider[Any], request: Any, context: MintContext) -> MintedCredential:
            credential = original(self, request, context)
            captured.update(secret_values(credential))
            return credential

        monkeypatch.setattr(cls, "mint", mint)

    for cls in (VaultProvider, AwsStsProvider, GitHubAppProvider):
        spy(cls)
    return captured


def own_secrets(keys: AppKeys) -> list[str]:
    """The broker's own credentials in the stack: the AWS secret and a slice of the App key's body."""
    body = b"".join(keys.private_pem.splitlines()[1:-1]).decode()
    return [BROKER_SECRET, body[40:100], body[-100:-40]]


def run_all(env: BrokerEnv, *args: str) -> list[Result]:
    return [env.run(*flags, *args) for flags in FLAG_SETS]
