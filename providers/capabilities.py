"""What a provider may do beyond the contract of ``providers.base.Provider``: one protocol per capability.

The core asks ``isinstance(provider, Capability)`` (the protocols are
runtime-checkable) and leaves a provider without one alone: nothing to warm,
nothing a search after a crash could find (the credential is waited out),
no budget to reserve, no locks to share, no grants to check, no login to keep
fresh. A provider gains a capability by defining its members; there is
nothing to register.

* ``Warming``: its SDK imported early in the main thread, its clients and
  connections opened in a thread of its own (``broker.core.warming``).
* ``FindsMinted``: what a crash between the provider call and the store
  update left at the provider (``sweep``).
* ``Reserving``: revocations draw on a budget that can run out (AWS
  ``deny-policy``: a role's inline policies), so room is held before minting,
  and ``status --json`` and ``doctor`` show the budgets.
* ``SharesLocks``: locks with this host's other brokers (files in
  ``state_dir/locks``) and with a fleet's (the shared store's ``FleetState``).
* ``ChecksGrants``: ``doctor`` checks what the policy's grants on the instance need.
* ``Refreshing``: a long-lived broker keeps its own login valid.
* ``Narrowing``: says whether one of its credentials is at most as wide as
  another, so a session's sandbox may be given narrower child sessions
  (``broker.core.delegation``); without it, none of its credentials is delegated.
* ``VersionedSecrets``: its secret has no expiry but versions (Vault's KV v2,
  ``kind: secret``): a running session watches the current version and
  swaps a new one in behind its placeholder (``broker.core.running.refreshing``).
* ``Placeholding``: its credentials can be ``inject: proxy`` (it declares
  ``Provider.proxy``): it hands the core their files with placeholders in them
  and the secret the proxy puts in, so no module of the core knows where its
  files hold a secret (``broker.core.credential.proxied`` makes the injector).
* ``KeepsSecrets``: keeps a secret another instance of the config reads and
  writes back (Vault's KV v2: an OAuth refresh token, rotated at each use).
* ``UsesKeptSecrets``: keeps its own secret in such an instance; the config
  hands it the instances once all are built (``broker.core.inputs.config``).
* ``UsesIssuer``: it signs with the broker's OpenID Connect issuer
  (``[identity]``): its credentials are session tokens, or it logs in or
  federates with one instead of a long-lived key. The core hands it a
  ``TokenIssuer`` when the broker opens, as it hands ``SharesLocks`` its locks.
* ``TransitSigning``: it signs with a key that never leaves it (Vault's
  transit engine): the issuer's key, when ``[identity] transit_key`` names it.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from broker.vocab.checks import Check
from broker.vocab.secret import AwsKeys, Secret
from providers.base import Grant, MintContext, MintedCredential, ProxiedCredential, RevokeTarget
from providers.issuer import MAX_TOKEN_LIFETIME, SignedToken, TokenIssuer, TransitKey, TransitSigning, UsesIssuer

__all__ = [
    "CAPABILITIES",
    "MAX_TOKEN_LIFETIME",
    "ChecksGrants",
    "DenyBudget",
    "DenyRecord",
    "FindsMinted",
    "FleetState",
    "KeepsSecrets",
    "KeptSecret",
    "Narrowing",
    "Placeholding",
    "Refreshing",
    "Reserving",
    "SharesLocks",
    "SignedToken",
    "TokenIssuer",
    "TransitKey",
    "TransitSigning",
    "UsesIssuer",
    "UsesKeptSecrets",
    "VersionedSecrets",
    "Warming",
]


@runtime_checkable
class Warming(Protocol):
    """Gets ready for the process's next calls before they are made (``minting``: an issue's, else a revocation's)."""

    @property
    def warm_first(self) -> bool:
        """Warmed before the others (``broker.core.warming``): its calls are the longest chain of round trips."""

    def preload(self, minting: bool) -> None:
        """Import the SDK now, in the calling thread (the core's main thread, before its worker threads use it:
        some SDKs, requests among them, break when first imported by two threads at once)."""

    def warm_up(self, minting: bool) -> None:
        """Open the clients and kept-alive connections (``providers.warm``); runs in a thread of its own while the
        broker does local work. Sends nothing that mints or changes anything; may raise (the real call reports)."""


@runtime_checkable
class FindsMinted(Protocol):
    """Finds the credentials it minted for a session that the store never heard of (a crash in between).

    ``planned_reference`` is stored with the ``minting`` state before the
    provider call; ``sweep`` hands it back to ``find_minted``. Vault searches
    token metadata; AWS names the session from the plan (it cannot list
    sessions). A provider without this capability (GitHub) is waited out: its
    credentials die at the session's end plus its ``fixed_lifetime``.
    """

    @property
    def search_is_exhaustive(self) -> bool:
        """True when ``find_minted`` searches the provider, so that finding nothing proves nothing was minted."""

    def planned_reference(self, request: Any, context: MintContext) -> dict[str, str]:
        """What the reference will hold that is known before minting."""

    def find_minted(self, session_id: str, credential: str, planned: Mapping[str, str]) -> list[dict[str, str]]:
        """References of what may have been minted for ``credential`` of ``session_id`` (each is then revoked)."""


@dataclass(frozen=True)
class DenyBudget:
    """How full a role's revocation list is (AWS ``deny-policy``: its inline policies, 10,240 characters).

    ``used`` is what the role's inline policies take now; ``reserved`` what
    they would take with every live broker session of the role revoked (an
    issue needs room for one more next to that; ``full``: there is none).
    Both are None when the provider could not be read; ``error`` says why.
    ``role`` is the role's ARN.
    """

    role: str
    live_sessions: int
    limit: int
    used: int | None = None
    reserved: int | None = None
    full: bool = False
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "role": self.role,
            "live_sessions": self.live_sessions,
            "used": self.used,
            "reserved": self.reserved,
            "limit": self.limit,
            "full": self.full,
        }
        if self.error:
            document["error"] = self.error
        return document


@runtime_checkable
class Reserving(Protocol):
    """Revokes into a budget that can run out: room for each revocation is held before the credential is minted."""

    def reserve(
        self,
        wanted: Sequence[tuple[Any, MintContext]],
        live: Callable[[], Sequence[RevokeTarget]],
        now: datetime,
    ) -> contextlib.AbstractContextManager[None] | None:
        """Hold room to revoke ``wanted`` later, next to what is live, while the context lasts (None: no room needed).

        ``live()`` reads every unexpired credential of this provider the store
        knows, revoked or not; call it once holding whatever lock keeps other
        issues out. The core enters the context before minting and leaves it
        once the new credentials are in the store. Raises ``PolicyDenied``
        when there is no room (nothing is minted then).
        """

    def budget_role(self, reference: Mapping[str, str]) -> str | None:
        """The role whose deny budget revoking this credential draws on; None when there is none."""

    def deny_budgets(self, roles: Collection[str], live: Sequence[RevokeTarget], now: datetime) -> list[DenyBudget]:
        """The budgets of ``roles`` (names from ``budget_role``); a provider failure is an ``error``, never raised."""


@dataclass(frozen=True, order=True)
class DenyRecord:
    """One value a provider denies at its side until ``until`` (AWS: an entry of a role's deny policy)."""

    until: datetime
    key: str
    value: str


class FleetState(ABC):
    """What a provider shares with the brokers on other hosts through the session store (fleet mode).

    ``lock`` is held across hosts and released if this process dies; the deny
    records of a ``scope`` (AWS: one role) are the source of truth a provider
    computes its whole deny document from, under that scope's lock.
    """

    @abstractmethod
    def lock(self, name: str, what: str) -> contextlib.AbstractContextManager[None]:
        """Hold the lock ``name`` (``what`` names it in a timeout error) while the context lasts."""

    @abstractmethod
    def add_deny_records(self, scope: str, records: Sequence[DenyRecord]) -> None:
        """Remember ``records`` (a value already there keeps the later ``until``)."""

    @abstractmethod
    def deny_records(self, scope: str, now: datetime) -> list[DenyRecord]:
        """The records of ``scope`` that have not ended by ``now``."""


@runtime_checkable
class SharesLocks(Protocol):
    """Holds locks with the other brokers writing the same provider state (the core says where, once opened)."""

    def use_lock_dir(self, path: Path) -> None:
        """Where this host's brokers keep cross-process locks (``state_dir/locks``)."""

    def use_fleet(self, fleet: FleetState) -> None:
        """Share locks and deny records with brokers on other hosts (``store = "postgresql://..."``)."""


@runtime_checkable
class ChecksGrants(Protocol):
    """``broker doctor`` checks what the policy's grants on this instance need, once its own login passed."""

    def grant_health(self, grants: Sequence[Grant[Any]]) -> list[Check]:
        """One check per need (rules as ``Provider.health``: no mint, no raise, no secret)."""


@runtime_checkable
class Refreshing(Protocol):
    """Keeps the broker's own login valid; ``broker serve`` calls it on its sweep interval."""

    def refresh(self, within: int) -> None:
        """Keep the login valid for ``within`` seconds more (twice the interval). A long-lived broker outlives a
        login's TTL. Never raises for a provider problem: the next call that needs the login reports it."""


@runtime_checkable
class Narrowing(Protocol):
    """Says whether a request is covered by another of the same provider: what a delegated session may ask of
    its parent's credential. Only the provider type knows what narrower means for its credentials (repositories
    and permission levels, Vault policies and roles, an AWS session policy's statements)."""

    def narrower(self, child: Any, parent: Any) -> list[str]:
        """Why ``child`` is wider than ``parent`` (both requests of this provider), one reason per widening key,
        each starting with that key of ``child`` (``repositories[1]: ...``); empty when ``child`` is covered."""


@runtime_checkable
class VersionedSecrets(Protocol):
    """Reads secrets the operator changes by writing a new version (no expiry): which version is current."""

    def version_of(self, reference: Mapping[str, str]) -> str | None:
        """The version a credential it minted holds, from its ``reference`` (no call); None: not a versioned kind."""

    def current_version(self, request: Any) -> str:
        """The current version of what ``request`` reads (a call). Raises ``ProviderError`` when it cannot be
        read, or when the current version is deleted or destroyed (its value cannot be read either)."""


@runtime_checkable
class Placeholding(Protocol):
    """Hands the core an ``inject: proxy`` credential as the sandbox gets it and as the proxy puts it in: only the
    provider type knows where its files hold the secret and what a placeholder of it looks like (AWS: the key id,
    secret and session token of its credentials file, an endpoint in its config file)."""

    def placeholders(self, request: Any, credential: MintedCredential, address: str) -> ProxiedCredential:
        """``credential`` (just minted for ``request``) with placeholders in its files, the secret the proxy puts in
        and its placeholder. ``address`` is where the sandbox reaches the provider through the proxy
        (``https://HOST[:PORT]``, its first proxy host): a file naming the provider's own address points there.
        ``ProviderError`` when a file holds a secret the proxy cannot stand in for."""

    def proxy_secret(self, credential: MintedCredential) -> Secret | AwsKeys:
        """What the proxy puts in for ``credential`` (a renewal, behind the placeholder its first credential got),
        read from the credential alone (no call)."""


@dataclass(frozen=True)
class KeptSecret:
    """A secret as its keeper holds it, and the version it read (what a write back must still find there)."""

    value: Secret
    version: int


@runtime_checkable
class KeepsSecrets(Protocol):
    """Keeps secrets another provider instance reads and rewrites (Vault's KV v2 engine, ``secret_mount``)."""

    def read_kept(self, path: str, field: str) -> KeptSecret:
        """The field's value and the secret's current version; ``ProviderError`` when it cannot be read, or the
        field is missing, empty or not one line of printable text."""

    def write_kept(self, path: str, field: str, value: Secret, version: int) -> bool:
        """Write ``value`` into the field (the secret's other fields kept) if the secret is still at ``version``
        (check-and-set); False when another writer got there first (theirs stays). ``ProviderError`` when it
        cannot be written."""


@runtime_checkable
class UsesKeptSecrets(Protocol):
    """Keeps a secret of its own in another instance of the config (an OAuth refresh token in Vault's KV)."""

    def use_keepers(self, instances: Mapping[str, object]) -> None:
        """Take the instance it names from the config's ``instances`` (called once all are built); a
        ``ConfigError`` naming its key when that is not one of the config's ``KeepsSecrets`` instances."""


#: Every capability, in the order this module describes them.
CAPABILITIES = (
    Warming,
    FindsMinted,
    Reserving,
    SharesLocks,
    ChecksGrants,
    Refreshing,
    Narrowing,
    VersionedSecrets,
    Placeholding,
    KeepsSecrets,
    UsesKeptSecrets,
    UsesIssuer,
    TransitSigning,
)
