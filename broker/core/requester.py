"""The caller of the broker, apart from the policy, so a command that reads no policy (``revoke``) does not load it."""

from __future__ import annotations

import pwd
import re
from dataclasses import dataclass

from broker.vocab.globs import any_match

UID_REQUESTER = re.compile(r"uid:([0-9]{1,10})")
MAX_UID = 2**32 - 2  # (uid_t) -1 is no uid


@dataclass(frozen=True)
class Requester:
    """The caller of the broker: OS user name and uid."""

    name: str
    uid: int

    def __str__(self) -> str:
        return self.name or f"uid:{self.uid}"

    def matches(self, pattern: str) -> bool:
        if pattern.startswith("uid:"):
            return pattern == f"uid:{self.uid}"
        return any_match((pattern,), self.name)


def requester_uid_of(requester: str) -> int | None:
    """The uid a requester as recorded (``str(Requester)``) names on this host: ``uid:N``, or a user's name."""
    if match := UID_REQUESTER.fullmatch(requester):
        uid = int(match.group(1))
        return uid if uid <= MAX_UID else None
    try:
        return pwd.getpwnam(requester).pw_uid if requester else None
    except KeyError:
        return None
