"""A request's digest: how it is made, how an approver's is read and compared (standard library only).

Kept apart from ``ticket`` (which reads manifests and decisions) so that the
paths that only decide or withdraw a request, ``revoke`` among them, load
no manifest parser.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any

from broker.vocab.errors import BadInput

DIGEST = re.compile(r"(?:sha256:)?([0-9a-fA-F]{64})")


def digest_of(summary: dict[str, Any]) -> str:
    """SHA-256 of the summary's canonical JSON (sorted keys, no spaces, ASCII), as 64 hex digits."""
    canonical = json.dumps(summary, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def given_digest(text: str) -> str:
    """The digest an approver typed (64 hex digits, ``sha256:`` optional), lower-cased; exit 2 otherwise."""
    match = DIGEST.fullmatch(text.strip())
    if match is None:
        raise BadInput("--digest: expected the request's SHA-256, 64 hex digits (as broker approvals shows it)")
    return match.group(1).lower()


def same_digest(given: str, expected: str) -> bool:
    """Compared in constant time."""
    return hmac.compare_digest(given.encode(), expected.encode())
