"""Two audit keys in two files: lookup needs only the fingerprint key, and a swapped key is refused, not "clean"."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from broker.audit.keys import (
    fingerprint_key_id_for,
    key_id_for,
    load_fingerprint_keys,
    load_or_create_keys,
    load_signing_keys,
)
from broker.vocab.secret import Secret
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.openbao import VAULT_TASK


def live_token(env: BrokerEnv) -> tuple[str, str]:
    """Issue a session; its id and its Vault token as the sandbox sees it."""
    session = env.run("issue", "--task", str(env.write_task(VAULT_TASK)), "--json").json()["session"]
    return session, (env.runtime_dir / session / "kv" / "token").read_text()


def test_the_two_keys_live_in_two_files_and_neither_holds_the_other(tmp_path: Path) -> None:
    keys = load_or_create_keys(tmp_path / "audit.key", tmp_path / "fingerprint.key")
    signing = json.loads((tmp_path / "audit.key").read_text())
    fingerprint = json.loads((tmp_path / "fingerprint.key").read_text())
    assert "hmac_key" not in signing and "signing_key" not in fingerprint
    assert keys.fingerprints.key_id == fingerprint_key_id_for(keys.fingerprints.hmac_key)
    assert base64.b64encode(keys.fingerprints.hmac_key.reveal_bytes()).decode() not in keys.fingerprints.key_id


@pytest.mark.server
def test_lookup_never_opens_the_signing_key(vault_env: BrokerEnv, tmp_path: Path) -> None:
    session, token = live_token(vault_env)
    signing = vault_env.root / "audit.key"
    signing.rename(tmp_path / "audit.key.away")  # an auditor's machine that holds only the fingerprint key
    result = vault_env.run("audit", "lookup", "--secret-stdin", "--json", stdin=token)
    assert result.code == 0, result.stderr
    assert [m["session"] for m in result.json()] == [session]
    assert not os.path.lexists(signing)  # nor created it


@pytest.mark.server
def test_a_swapped_fingerprint_key_is_refused_not_reported_clean(vault_env: BrokerEnv) -> None:
    _, token = live_token(vault_env)
    fingerprint = vault_env.root / "fingerprint.key"
    fingerprint.unlink()
    load_or_create_keys(vault_env.root / "audit.key", fingerprint)  # a fresh, different HMAC key in its place
    result = vault_env.run("audit", "lookup", "--secret-stdin", stdin=token)
    assert result.code == 2, (result.code, result.stdout, result.stderr)
    assert "no credential" not in result.stdout
    assert result.stderr.startswith(f"broker: error: fingerprint key {fingerprint} (key id ")
    assert "restore the right fingerprint key" in result.stderr and token not in result.stderr


@pytest.mark.server
def test_rotating_either_key_keeps_older_records_usable(vault_env: BrokerEnv) -> None:
    first_session, first_token = live_token(vault_env)
    old_signing = load_signing_keys(vault_env.root / "audit.key").key_id
    old_fingerprint = load_fingerprint_keys(vault_env.root / "fingerprint.key").key_id
    rotated = vault_env.run("audit", "rotate-key", "--key", "fingerprint")
    assert rotated.code == 0 and "new fingerprint key" in rotated.stdout
    assert load_signing_keys(vault_env.root / "audit.key").key_id == old_signing  # untouched
    second_session, second_token = live_token(vault_env)
    issued = [r for r in vault_env.log_records() if r["event"] == "credential.issued"]
    assert issued[0]["fingerprint_key_id"] == old_fingerprint
    assert issued[-1]["fingerprint_key_id"] != old_fingerprint
    for session, token in ((first_session, first_token), (second_session, second_token)):
        found = vault_env.run("audit", "lookup", "--secret-stdin", "--json", stdin=token)
        assert found.code == 0 and [m["session"] for m in found.json()] == [session]
    assert vault_env.run("audit", "rotate-key", "--key", "signing").code == 0
    assert load_fingerprint_keys(vault_env.root / "fingerprint.key").key_id == issued[-1]["fingerprint_key_id"]
    assert vault_env.run("audit", "rotate-key", "--key", "both").code == 2


def legacy_key_file(path: Path) -> tuple[bytes, bytes]:
    """The one-file layout of earlier releases: signing and HMAC keys together."""
    signing = Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    hmac_key = os.urandom(32)
    document = {
        "version": 1,
        "created": "2026-01-01T00:00:00Z",
        "hmac_key": base64.b64encode(hmac_key).decode(),
        "signing_key": base64.b64encode(signing).decode(),
        "retired": [],
    }
    path.write_text(json.dumps(document))
    path.chmod(0o400)
    return signing, hmac_key


@pytest.mark.server
def test_a_one_file_installation_is_told_how_to_migrate_and_migrates_with_one_command(vault_env: BrokerEnv) -> None:
    signing, hmac_key = legacy_key_file(vault_env.root / "audit.key")
    refused = vault_env.run("issue", "--task", str(vault_env.write_task(VAULT_TASK)))
    assert refused.code == 2
    assert "older one-file layout" in refused.stderr and "broker audit migrate-keys" in refused.stderr
    assert not vault_env.log_records()  # nothing minted, nothing logged
    doctor = vault_env.run("doctor", "--json").json()
    [check] = [c for c in doctor["checks"] if c["name"] == "audit_key"]
    assert not check["ok"] and check["fix"] == "broker audit migrate-keys"

    migrated = vault_env.run("audit", "migrate-keys")
    assert migrated.code == 0, migrated.stderr
    public = Ed25519PrivateKey.from_private_bytes(signing).public_key().public_bytes_raw()
    assert load_signing_keys(vault_env.root / "audit.key").key_id == key_id_for(public)
    fingerprints = load_fingerprint_keys(vault_env.root / "fingerprint.key")
    assert fingerprints.hmac_key.reveal_bytes() == hmac_key
    assert "hmac_key" not in (vault_env.root / "audit.key").read_text()
    assert vault_env.run("audit", "migrate-keys").stdout.startswith("nothing to do")

    _, token = live_token(vault_env)
    [issued] = [r for r in vault_env.log_records() if r["event"] == "credential.issued"]
    assert issued["fingerprint"] == Secret(token).fingerprint(Secret(hmac_key))  # the same key as before
    assert vault_env.run("audit", "verify").code == 0
