"""The role session name and source identity of one credential, derived from its session, name and generation.

Mint assumes the role with them, ``sweep`` looks a crashed mint up by them
and the deny budget counts by them, so all three derive them here, the same
way. A renewal is a new generation with names of its own: revoking the
credential it replaced denies that one's names only, never its successor's.
'@' is in neither a session id's nor a credential name's alphabet, so a
generation's names cannot collide with another credential's.
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


def generation_names(session_id: str, credential: str, generation: int) -> tuple[str, str]:
    """``(RoleSessionName, SourceIdentity)``: the session id itself first, ``<session>@<n>`` for renewal n."""
    if generation <= 0:
        return role_session_name(session_id, credential), session_id
    return role_session_name(session_id, f"{credential}@{generation}"), f"{session_id}@{generation}"


def generation_of(session_id: str, source_identity: str) -> int | None:
    """The generation ``source_identity`` names within ``session_id``; None when it names none."""
    if source_identity == session_id:
        return 0
    number = source_identity.removeprefix(f"{session_id}@")
    return int(number) if number != source_identity and number.isdigit() and number[0] != "0" else None
