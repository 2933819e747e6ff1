"""The provider interface: what every provider type (Vault, AWS STS, GitHub App) implements.

A provider type knows four things about its credentials: how a manifest asks
for one (``parse_request``, untrusted input), how a policy file grants one
(``compile_grant``, operator input), how to mint one (``mint``) and how to
revoke it (``revoke``).

Values crossing this interface are frozen dataclasses; secret material only
travels as ``Secret``. Provider modules import their SDKs lazily, inside the
methods that call the provider, so loading a config stays cheap.
"""

from __future__ import annotations

import contextlib
import enum
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, TypeVar

from broker.vocab.errors import BrokerError, ProviderError
from broker.vocab.fields import Fields
from broker.vocab.secret import Secret

if TYPE_CHECKING:
    from providers.delivery import ProxyDelivery

__all__ = [
    "FIX_MARK",
    "CredentialRequest",
    "DenyBudget",
    "DenyRecord",
    "FleetState",
    "Grant",
    "HealthCheck",
    "MintContext",
    "MintRejected",
    "MintedCredential",
    "Provider",
    "ProviderError",
    "RequestT",
    "RevokeOutcome",
    "RevokeTarget",
]


#: One ``broker doctor`` line of a provider: check name, passed, detail (with an optional fix).
HealthCheck: TypeAlias = tuple[str, bool, str]
#: Separates a failed check's detail from what to do about it.
FIX_MARK = " — fix: "
#: More clock skew than this against a provider fails the ``clock`` check (seconds).
MAX_CLOCK_SKEW = 60


def clock_check(date_header: str | None, received: float, provider: str) -> HealthCheck | None:
    """The ``clock`` check from a response's ``Date`` header (received at ``received``); None without one."""
    from email.utils import parsedate_to_datetime

    try:
        server = parsedate_to_datetime(date_header).timestamp() + 0.5 if date_header else None
    except (TypeError, ValueError):
        server = None
    if server is None:
        return None
    skew = round(server - received)
    if abs(skew) <= MAX_CLOCK_SKEW:
        return ("clock", True, f"skew {skew:+d} s against {provider}")
    side = "behind" if skew > 0 else "ahead of"
    return (
        "clock",
        False,
        f"this host is {abs(skew)} s {side} {provider} (more than {MAX_CLOCK_SKEW} s){FIX_MARK}"
        "synchronise this host's clock (chrony, systemd-timesyncd)",
    )


@dataclass(frozen=True)
class CredentialRequest:
    """One credential as a manifest asks for it; provider types subclass it."""

    name: str
    provider: str
    ttl: int | None

    def delivery(self) -> ProxyDelivery | None:
        """The hosts and header the request names for the proxy to put its secret in (``providers.delivery``)."""
        return None

    def scope(self) -> dict[str, Any]:
        """The requested scope as JSON-able data (for session.json and the log)."""
        return {}


RequestT = TypeVar("RequestT", bound=CredentialRequest)


@dataclass(frozen=True)
class Grant(ABC, Generic[RequestT]):
    """One compiled grant of a policy rule for one provider instance."""

    provider: str
    max_ttl: int | None

    @abstractmethod
    def check(self, request: RequestT) -> list[str]:
        """Why ``request`` falls outside this grant; an empty list means it is covered."""


@dataclass(frozen=True)
class MintContext:
    """What a provider needs to know about the session it mints for."""

    session_id: str
    task: str
    requester: str
    ttl: int  # the capped lifetime for this credential, in seconds
    session_expires_at: datetime
    mount_dir: PurePosixPath  # where this credential's files appear inside the sandbox
    generation: int = 0  # 0 at issue, n for the credential's n-th renewal


@dataclass(frozen=True)
class MintedCredential:
    """A freshly minted credential: ``reference`` is the provider's non-secret handle (stored and logged),
    ``secret`` what gets fingerprinted, ``files`` maps a file name inside the credential's directory to its
    content, ``revoke_secret`` what a revocation needs beyond ``reference`` (kept on tmpfs only)."""

    reference: Mapping[str, str]
    secret: Secret
    files: Mapping[str, Secret | str]
    expires_at: datetime
    scope: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=dict)
    revoke_secret: Secret | None = None


class MintRejected(ProviderError):
    """The provider returned a credential that fails a check after minting: it must not be handed out.

    It exists at the provider all the same, so the provider does not drop it:
    it raises this with the credential, and the core logs its fingerprint and
    revokes it (or keeps it pending for ``sweep``) like any other.
    """

    def __init__(self, message: str, credential: MintedCredential) -> None:
        super().__init__(message, retryable=False)
        self.credential = credential


@dataclass(frozen=True)
class RevokeTarget:
    """What the store remembers about a credential, enough to revoke it."""

    name: str
    reference: Mapping[str, str]
    expires_at: datetime | None
    revoke_secret: Secret | None = None


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


class RevokeOutcome(enum.StrEnum):
    REVOKED = "revoked"
    PENDING = "pending"
    EXPIRED = "expired"
    VALID_UNTIL_EXPIRY = "valid-until-expiry"


#: The calls the core makes across the seam; an exception outside the ``BrokerError`` family that
#: escapes one of them (a provider bug, an SDK surprise) comes out as a ``ProviderError`` naming it.
GUARDED_CALLS = ("mint", "revoke", "find_minted", "planned_reference")


def _guarded(action: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Provider[Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except BrokerError:
            raise
        except Exception as exc:
            # Only the type: an unexpected exception's text may hold anything, a secret included.
            raise ProviderError(
                f"{self.type_name} {self.name}: {action} failed: unexpected {type(exc).__name__}", retryable=False
            ) from exc

    call.__dict__["guarded"] = True
    return call


class Provider(ABC, Generic[RequestT]):
    """One configured provider instance (``[providers.NAME]`` in the config).

    Every subclass's ``mint``, ``revoke``, ``find_minted`` and ``planned_reference``
    is wrapped on class creation so that nothing but the ``BrokerError`` family
    crosses the seam, whatever the implementation forgets to convert.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for action in GUARDED_CALLS:
            method = cls.__dict__.get(action)
            if callable(method) and not getattr(method, "guarded", False):
                setattr(cls, action, _guarded(action.replace("_", " "), method))

    type_name: ClassVar[str]
    #: The provider's own ceiling on a credential's lifetime, in seconds (None: no limit).
    max_ttl: ClassVar[int | None] = None
    #: The provider's own floor; a shorter capped TTL is a bad request.
    min_ttl: ClassVar[int] = 1
    #: Whether ``find_minted`` can really search (otherwise it always answers "nothing found").
    can_find_minted: ClassVar[bool] = False
    #: A lifetime the provider gives every credential whatever the TTL asked (GitHub: one hour).
    fixed_lifetime: ClassVar[int | None] = None

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock_dir: Path | None = None
        self.fleet: FleetState | None = None

    def use_lock_dir(self, path: Path) -> None:
        """Where this host's brokers keep cross-process locks (``state_dir/locks``)."""
        self.lock_dir = path

    def use_fleet(self, fleet: FleetState) -> None:
        """Share locks and deny records with brokers on other hosts (``store = "postgresql://..."``)."""
        self.fleet = fleet

    @classmethod
    @abstractmethod
    def from_config(cls, name: str, fields: Fields, config_dir: Path) -> Provider[RequestT]:
        """Build the instance from its config table; no network, no SDK import."""

    @classmethod
    @abstractmethod
    def parse_request(cls, fields: Fields, *, name: str, provider: str, ttl: int | None) -> RequestT:
        """Read the provider-specific fields of one manifest credential (untrusted)."""

    @classmethod
    @abstractmethod
    def compile_grant(cls, fields: Fields, *, provider: str, max_ttl: int | None) -> Grant[RequestT]:
        """Read and compile the provider-specific fields of one policy grant."""

    @abstractmethod
    def mint(self, request: RequestT, context: MintContext) -> MintedCredential:
        """Mint the credential at the provider; raise ``ProviderError`` on failure."""

    @abstractmethod
    def revoke(self, target: RevokeTarget, now: datetime) -> RevokeOutcome:
        """Revoke at the provider; raise ``ProviderError`` when it cannot be done now."""

    #: Modules the provider imports on first use. The core imports them in its main thread before it
    #: starts minting or revoking threads: some SDKs (requests) break when first imported by two threads.
    sdk_modules: ClassVar[tuple[str, ...]] = ()
    #: The part of them a revocation needs, when less (a cold revoke then imports no more).
    revoke_sdk_modules: ClassVar[tuple[str, ...] | None] = None
    #: Warmed before the others (``broker.core.warming``): its calls are the longest chain of round trips.
    warm_first: ClassVar[bool] = False

    def preload(self, minting: bool = True) -> None:
        """Import the provider's SDK now, in the calling thread (for a revocation only what it needs)."""
        import importlib

        wanted = self.sdk_modules if minting or self.revoke_sdk_modules is None else self.revoke_sdk_modules
        for module in wanted:
            importlib.import_module(module)

    def warm_up(self, minting: bool) -> None:
        """Get ready for this process's next calls (``minting``: an issue's, else a revocation's): the SDK, the
        clients, kept-alive connections (``providers.warm``). Sends nothing that mints or changes anything;
        runs in a thread of its own while the broker does local work; may raise (the real call reports)."""
        self.preload(minting)

    def planned_reference(self, request: RequestT, context: MintContext) -> dict[str, str]:
        """What the reference will hold that is known before minting (stored with the ``minting`` state)."""
        return {}

    def find_minted(self, session_id: str, credential: str, planned: Mapping[str, str]) -> list[dict[str, str]]:
        """References of credentials this provider minted for a session that the store never heard of.

        ``sweep`` asks after a crash between the provider call and the store
        update; ``planned`` is what ``planned_reference`` said before the call.
        Vault searches token metadata; AWS names the session from ``planned``;
        GitHub cannot search and returns nothing: its tokens expire within the hour.
        """
        return []

    def reserve(
        self,
        wanted: Sequence[tuple[RequestT, MintContext]],
        live: Callable[[], Sequence[RevokeTarget]],
        now: datetime,
    ) -> contextlib.AbstractContextManager[None]:
        """Hold room to revoke ``wanted`` later, next to what is live, while the context lasts.

        ``live()`` reads every unexpired credential of this provider the store
        knows, revoked or not; call it once holding whatever lock keeps other
        issues out. The core enters the context before minting and leaves it
        once the new credentials are in the store. Raises ``PolicyDenied``
        when there is no room (nothing is minted then). The default needs no
        room.
        """
        return contextlib.nullcontext()

    def budget_role(self, reference: Mapping[str, str]) -> str | None:
        """The role whose deny budget revoking this credential draws on; None when there is none."""
        return None

    def deny_budgets(self, roles: Collection[str], live: Sequence[RevokeTarget], now: datetime) -> list[DenyBudget]:
        """The budgets of ``roles`` (names from ``budget_role``); a provider failure is an ``error``, never raised."""
        return []

    def health(self) -> list[HealthCheck]:
        """``broker doctor``'s checks of this instance: ``(check, ok, detail)``, mints nothing.

        Uses the broker's own identity only; a failed check's detail may end
        with ``FIX_MARK`` and what to do. Never raises for a provider problem,
        never puts a secret in a detail. The default checks nothing.
        """
        return []

    def grant_health(self, grants: Sequence[Grant[RequestT]]) -> list[HealthCheck]:
        """``broker doctor``'s checks of what the policy's ``grants`` of this instance need (rules as ``health``)."""
        return []

    def refresh(self, within: int) -> None:
        """Keep the broker's own login valid for ``within`` seconds more; ``broker serve`` calls it on its sweep
        interval (``within`` is twice that interval).

        A long-lived broker outlives a login's TTL. Never raises for a provider
        problem: the next call that needs the login reports it. The default does nothing.
        """

    def close(self) -> None:
        """Release connections."""
