"""The caller of the broker, apart from the policy, so a command that reads no policy (``revoke``) does not load it."""

from __future__ import annotations

from dataclasses import dataclass

from broker.vocab.globs import any_match


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
