"""Checkpoint signatures as an auditor checks them: the public keys they pin, and one checkpoint's signature.

An auditor verifies the issuance log with the public keys alone
(``--public-key``): ``ed25519:<base64>`` lines, current and retired keys,
each known by its key id (``broker.audit.keys``); in a fleet a line may name
the host whose key it is, and a checkpoint of that host must be signed by
it. A checkpoint's Ed25519 signature covers the head it vouches for
(``broker.audit.log.checkpoint_message``); ``broker.audit.verify`` decides
which checkpoints it checks and names the damage.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from broker.audit.keys import key_id_for
from broker.audit.log import checkpoint_message
from broker.vocab.errors import BadInput


def parse_public_keys(text: str) -> dict[str, Ed25519PublicKey]:
    """``ed25519:<base64>`` lines (current and retired keys) by key id."""
    return parse_pinned_keys(text)[0]


def parse_pinned_keys(text: str) -> tuple[dict[str, Ed25519PublicKey], dict[str, str]]:
    """``ed25519:<base64> [HOST]`` lines: the keys by key id, and the host each named key belongs to (a fleet)."""
    keys: dict[str, Ed25519PublicKey] = {}
    hosts: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, host = line.partition(" ")
        try:
            raw = base64.b64decode(key.removeprefix("ed25519:"), validate=True)
            keys[key_id_for(raw)] = Ed25519PublicKey.from_public_bytes(raw)
        except ValueError:
            raise BadInput(f"public key file line {number}: not an ed25519:<base64> key") from None
        if host.strip():
            hosts[key_id_for(raw)] = host.strip()
    if not keys:
        raise BadInput("public key file holds no key")
    return keys, hosts


def signature_ok(record: Mapping[str, object], keys: Mapping[str, Ed25519PublicKey]) -> bool:
    """Whether ``record`` (a checkpoint whose key is in ``keys``) carries that key's signature of its head."""
    key = keys[str(record.get("key_id"))]
    try:
        signature = base64.b64decode(str(record.get("signature")), validate=True)
        key.verify(signature, checkpoint_message(int(str(record["head_seq"])), str(record["head_hash"])))
    except (ValueError, InvalidSignature):
        return False
    return True
