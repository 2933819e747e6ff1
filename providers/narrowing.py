"""A provider's capability to say whether one of its credentials is at most as wide as another (delegation).

A session whose rule says ``delegate: true`` may hand its sandbox's
sub-agents child sessions, each credential of which must be covered by a
credential of the parent (``broker.core.delegation``). Only the provider
type knows what "narrower" means for its credentials (repositories and
permission levels, Vault policies and roles, an AWS session policy's
statements), so the core asks the provider: ``narrower(child, parent)``
returns why ``child`` is wider than ``parent``, one reason per widening key,
each starting with the key (``repositories[1]: ...``); an empty list means
it is covered. A provider without this capability delegates nothing.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Narrowing(Protocol):
    """Says whether a request is covered by another of the same provider (``broker.core.delegation``)."""

    def narrower(self, child: Any, parent: Any) -> list[str]:
        """Why ``child`` is wider than ``parent`` (both requests of this provider), each reason starting with the
        widening key of ``child``; empty when ``child`` asks for nothing ``parent`` does not have."""
