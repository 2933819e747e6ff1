"""The refresh token grant against the real authorisation server: each token narrowed to the manifest's scopes and
resources, the rotated refresh token written back (a 0600 file, or Vault's KV v2 through the config's vault
instance), and one refresh at a time per refresh token across processes, so the server never sees a rotated
token again (which it answers by revoking the family)."""

from __future__ import annotations

import multiprocessing
import os
import stat
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from broker.vocab.errors import ConfigError
from broker.vocab.fields import Fields
from devstack.openbao import ROOT_TOKEN
from providers.base import RevokeOutcome
from providers.oauth.provider import OAuthProvider
from providers.vault.provider import VaultProvider
from tests.fixtures.oauth import MakeOAuth, OAuthStack, build_oauth
from tests.fixtures.openbao import OpenBao
from tests.providers.conformance import context, parse_request, target

pytestmark = pytest.mark.server


def ask(scopes: list[str], **more: Any) -> Any:
    return parse_request(OAuthProvider, {"scopes": scopes, **more})


def test_a_token_carries_the_scopes_and_the_resource_asked_and_the_rotated_refresh_token_is_written_back(
    make_oauth_provider: MakeOAuth, oauth_stack: OAuthStack
) -> None:
    provider = make_oauth_provider()
    file = provider.settings.refresh_token_file
    assert file is not None
    first = file.read_text().strip()
    minted = provider.mint(ask(["issues:read"]), context("s-refresh00001"))
    kept = file.read_text().strip()
    assert kept != first  # rotated, and the successor is what the file holds now
    assert stat.S_IMODE(os.stat(file).st_mode) == 0o600
    token = oauth_stack.ledger.find(minted.secret.reveal())
    assert token.scope == "issues:read"  # narrowed: the family holds three scopes
    assert token.resources == (oauth_stack.resource.resource,)
    assert minted.files == {"token": minted.secret}
    # the next mint presents the successor: no reuse, no refused refresh
    second = provider.mint(ask(["pulls:write"]), context("s-refresh00002"))
    assert oauth_stack.ledger.find(second.secret.reveal()).scope == "pulls:write"
    assert oauth_stack.ledger.reuse_detections == 0
    assert oauth_stack.ledger.find(first).replaced and oauth_stack.ledger.find(kept).replaced
    for credential in (minted, second):
        assert provider.revoke(target(ask(["issues:read"]), credential), datetime.now(UTC)) is RevokeOutcome.REVOKED


def test_a_host_the_instance_does_not_send_the_token_to_is_refused_before_any_call(
    make_oauth_provider: MakeOAuth, oauth_stack: OAuthStack
) -> None:
    provider = make_oauth_provider()
    with pytest.raises(Exception, match=r"hosts\[0\]: mcp.example.com:443 is not one of providers.oauth.proxy_hosts"):
        provider.mint(ask(["issues:read"], hosts=["mcp.example.com:443"]), context("s-refresh00003"))
    assert sum(oauth_stack.ledger.grants.values()) == 0


def _mint_in_a_process(table: dict[str, Any], config_dir: str, lock_dir: str | None, start: float, out: Any) -> None:
    provider = build_oauth(table, Path(config_dir))
    if lock_dir is not None:
        provider.use_lock_dir(Path(lock_dir))
    time.sleep(max(0.0, start - time.time()))
    try:
        provider.mint(ask(["issues:read"]), context(f"s-flight{os.getpid():05d}"[:14]))
        out.put("minted")
    except Exception as exc:  # what the parent counts: each process's outcome
        out.put(getattr(exc, "message", type(exc).__name__))


def _race(oauth_stack: OAuthStack, tmp_path: Path, lock_dir: Path | None, count: int) -> list[str]:
    oauth_stack.server.refresh_delay = 0.05  # each refresh answered a little later: a race would show
    table = oauth_stack.table()
    fork = multiprocessing.get_context("fork")
    out = fork.Queue()
    start = time.time() + 1.0
    processes = [
        fork.Process(target=_mint_in_a_process, args=(table, str(tmp_path), lock_dir and str(lock_dir), start, out))
        for _ in range(count)
    ]
    for process in processes:
        process.start()
    outcomes = [out.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    return outcomes


def test_processes_sharing_one_refresh_token_refresh_one_at_a_time(oauth_stack: OAuthStack, tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    outcomes = _race(oauth_stack, tmp_path, locks, 8)
    ledger = oauth_stack.ledger
    assert outcomes == ["minted"] * 8
    assert ledger.races == 0 and ledger.reuse_detections == 0
    assert sum(ledger.refreshes.values()) == 8  # one refresh per token minted, none repeated


def test_without_the_hosts_lock_the_same_processes_race_and_the_server_revokes_the_family(
    oauth_stack: OAuthStack, tmp_path: Path
) -> None:
    """What the single flight prevents: the same processes, each with only its own thread lock."""
    outcomes = _race(oauth_stack, tmp_path, None, 8)
    assert oauth_stack.ledger.races > 0
    assert oauth_stack.ledger.reuse_detections > 0
    assert any("refused the refresh token" in outcome for outcome in outcomes)


def test_a_refresh_token_kept_in_vault_is_read_there_and_its_successor_written_back(
    oauth_stack: OAuthStack, openbao: OpenBao, tmp_path: Path
) -> None:
    token_file = tmp_path / "vault-token"
    token_file.write_text(ROOT_TOKEN)
    token_file.chmod(0o600)
    fields = Fields({"addr": openbao.addr, "token_file": str(token_file)}, "providers.vault", ConfigError)
    vault = VaultProvider.from_config("vault", fields, tmp_path)
    first = oauth_stack.authorise()
    client = openbao.client()
    client.secrets.kv.v2.create_or_update_secret(path="oauth/mcp", secret={"refresh_token": first, "note": "kept"})
    table = oauth_stack.table(refresh_token_vault="vault", refresh_token_path="oauth/mcp")
    provider = build_oauth(table, tmp_path)
    with pytest.raises(ConfigError, match="refresh_token_vault: 'vault' is not a vault instance of this config"):
        provider.use_keepers({"vault": provider})
    provider.use_keepers({"vault": vault, "oauth": provider})
    minted = provider.mint(ask(["issues:read"]), context("s-vaultkept01"))
    data = client.secrets.kv.v2.read_secret_version(path="oauth/mcp", raise_on_deleted_version=True)["data"]["data"]
    assert data["refresh_token"] != first and data["note"] == "kept"
    assert oauth_stack.ledger.find(data["refresh_token"]) is not None
    assert oauth_stack.active(minted.secret.reveal())
    provider.mint(ask(["pulls:write"]), context("s-vaultkept02"))
    assert oauth_stack.ledger.reuse_detections == 0
    provider.close()
    vault.close()
