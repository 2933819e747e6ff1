"""The role session name of one credential, derived from its broker session and name.

Mint assumes the role with it, ``sweep`` looks a crashed mint up by it and
the deny budget counts by it, so all three derive it here, the same way.
"""

from __future__ import annotations

import hashlib


def role_session_name(session_id: str, credential: str) -> str:
    """``<session>.<credential>``, unique per credential ('.' is in neither name's alphabet)."""
    name = f"{session_id}.{credential}"
    if len(name) <= 64:
        return name
    digest = hashlib.sha256(f"{session_id}/{credential}".encode()).hexdigest()[:10]
    keep = max(64 - len(session_id) - len(digest) - 2, 0)
    return f"{session_id}.{credential[:keep]}.{digest}"[:64]
