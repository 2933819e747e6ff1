"""``broker audit public-key | rotate-key | migrate-keys``: the audit keys, shown, replaced and split."""

from __future__ import annotations

from broker.audit.keys import load_or_create_keys, migrate_key_file, rotate_fingerprint_key, rotate_signing_key
from broker.cli.audit.fleet import fleet_public_keys
from broker.cli.context import Invocation, echo
from broker.vocab.errors import BadInput


def public_key(run: Invocation) -> None:
    config = run.load_config()
    if config.store is not None:  # a fleet: every host's key, each with its host
        for line in fleet_public_keys(config):
            echo(line)
        return
    for line in load_or_create_keys(config.audit_key, config.fingerprint_key).public_key_lines():
        echo(line)


def rotate_key(run: Invocation, which: str) -> None:
    config = run.load_config()
    if which == "signing":
        signing = rotate_signing_key(config.audit_key)
        echo(f"new signing key {signing.key_id}; {len(signing.retired)} retired key(s) kept for verification")
    elif which == "fingerprint":
        fingerprint = rotate_fingerprint_key(config.fingerprint_key)
        echo(f"new fingerprint key {fingerprint.key_id}; {len(fingerprint.retired)} retired key(s) kept for lookup")
    else:
        raise BadInput(f"--key: {which[:20]!r} is not signing or fingerprint")


def migrate_keys(run: Invocation) -> None:
    config = run.load_config()
    done = migrate_key_file(config.audit_key, config.fingerprint_key)
    if done is None:
        echo(f"nothing to do: {config.audit_key} holds only the signing key")
        return
    echo(
        f"split {config.audit_key}: signing key {done.signing_key_id} stays there; fingerprint key"
        f" {done.fingerprint_key_id} moved to {config.fingerprint_key} ({done.retired} retired key(s) each)"
    )
