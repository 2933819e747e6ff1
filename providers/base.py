"""The provider contract: what every provider type (Vault, AWS STS, GitHub App) implements.

A provider type knows four things about its credentials:

* how a manifest asks for one (``parse_request``, untrusted input),
* how a policy file grants one (``compile_grant``, operator input),
* how to mint one (``mint``) and how to revoke it (``revoke``),

and declares its facts: what bounds their lifetime (``max_ttl``,
``min_ttl``, ``fixed_lifetime``), how the egress proxy puts its secrets in
(``proxy``), the environment names it owns (``reserved_env``, ``ca_env``)
and its manual (``manual()``: its keys for docs/reference.md). ``health`` and ``close`` have defaults. Everything a
provider may do beyond that (warm up, find what a crash left minted, hold a
deny budget, share locks, check its grants, refresh its login) is a protocol
in ``providers.capabilities`` that the core checks with ``isinstance``.

Values crossing this interface are frozen dataclasses; secret material only
travels as ``Secret``. Provider modules import their SDKs lazily, inside the
methods that call the provider, so loading a config stays cheap.
"""

from __future__ import annotations

import enum
import functools
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from broker.vocab.checks import Check
from broker.vocab.errors import BrokerError, ProviderError
from broker.vocab.fields import Fields
from broker.vocab.secret import AwsKeys, Secret

if TYPE_CHECKING:
    from broker.vocab.manual import ProviderManual
    from providers.delivery import ProxyDelivery

__all__ = [
    "CredentialRequest",
    "Grant",
    "MintContext",
    "MintRejected",
    "MintedCredential",
    "Provider",
    "ProviderError",
    "ProxiedCredential",
    "ProxyFacts",
    "RequestT",
    "RevokeOutcome",
    "RevokeTarget",
]


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

    def more_proxy_hosts(self, hosts: tuple[str, ...]) -> tuple[str, ...]:
        """``HOST:PORT`` this request adds to its provider's proxy ``hosts`` (AWS: the virtual-hosted S3 host of each
        bucket its session policy names); the core keeps those ``network`` allows. None by default."""
        return ()

    def proxy_refusal(self) -> str | None:
        """Why the proxy cannot put this credential's secret in (``inject: proxy``), though its provider has
        ``proxy`` facts; None when it can."""
        return None


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
    #: For a child session, asked for by a sandbox through its parent's ``broker.sock``: a provider whose
    #: revocations share a budget keeps part of it for the sessions the policy issues.
    delegated: bool = False
    proxied: bool = False  # inject: proxy: the secret stays in the session's proxy (AWS: a Deny of new credentials)
    #: Who the session is, for a provider whose credential names it (a token of the broker's issuer carries them).
    rule: str = ""  # the policy rule that granted the credential
    sandbox_uid: int | None = None  # the uid the sandbox runs as
    parent: str | None = None  # a child session's parent session


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


@dataclass(frozen=True)
class ProxiedCredential:
    """An ``inject: proxy`` credential as its provider hands it to the core (``providers.capabilities.Placeholding``).

    ``files`` are the credential's files as the sandbox gets them: each secret in them replaced by its placeholder
    (a file of the provider's own format, rewritten by the provider alone); ``secret`` is what the proxy's injector
    puts into requests (a token, or an AWS key id, secret and session token); ``placeholder`` is what stands for it
    in the files, of the same shape.
    """

    files: Mapping[str, Secret | str]
    secret: Secret | AwsKeys
    placeholder: Secret | AwsKeys


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
class ProxyFacts:
    """How the egress proxy puts a provider's secret into requests for it (``inject: proxy``).

    The proxy swaps the placeholder for the secret in ``Authorization``
    (Bearer, token, Basic) and in ``token_headers``, only in requests to the
    instance's ``proxy_hosts``; ``address_env``, when the provider's
    credentials set it, is pointed at the first of them over https; and
    ``stripped_headers`` and ``refused_answer_key`` keep the provider's own
    ways of handing the secret out elsewhere from the sandbox.
    """

    label: str  # how messages name these credentials ("GitHub")
    documented_as: str  # how docs/reference.md names them ("github_app", or a kind: "vault token")
    token_headers: tuple[str, ...] = ()  # lower-case names of headers whose whole value is the secret
    address_env: str | None = None  # the hint naming the provider's address
    #: Request headers the proxy takes out (lower case, ``-`` for ``_``): asking for an answer that would carry
    #: the secret elsewhere (Vault: response wrapping).
    stripped_headers: tuple[str, ...] = ()
    #: A top-level key of a JSON answer the proxy never passes on, and what it holds (Vault: ``wrap_info``, a
    #: wrapping token, which unwraps anywhere to the secret); its JSON answers are held back and checked whole.
    refused_answer_key: str | None = None
    refused_answer_name: str = ""
    #: The client signs each request itself (AWS SigV4): the proxy verifies the signature with the placeholder
    #: keys and re-signs with the real ones (``broker.egress.injectors.sigv4``) instead of swapping a header.
    resigns: bool = False
    #: Its credentials go only by the proxy (an OAuth access token, an exchanged token): a manifest asking for
    #: their files (``inject: file``) is refused.
    proxy_only: bool = False


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

    Every subclass's ``mint`` and ``revoke`` (and ``find_minted`` and
    ``planned_reference``: ``providers.capabilities.FindsMinted``) are wrapped
    on class creation so that nothing but the ``BrokerError`` family crosses
    the seam, whatever the implementation forgets to convert.
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
    #: A lifetime the provider gives every credential whatever the TTL asked (GitHub: one hour).
    fixed_lifetime: ClassVar[int | None] = None
    #: Whether only a secret kept at minting revokes it (GitHub: the token itself), so only the host keeping it can.
    revokes_with_kept_secret: ClassVar[bool] = False
    #: How the egress proxy puts its secrets in; None: its credentials cannot be ``inject: proxy``.
    proxy: ClassVar[ProxyFacts | None] = None
    #: A running exec renews its file-delivered credentials before they end, in place (a projected token: the
    #: sandbox reads the file again); others are renewed there only behind the proxy (``inject: proxy``).
    projected: ClassVar[bool] = False
    #: Its credentials are tokens of the broker's issuer: once their session is revoked, each one's ``jti`` (in its
    #: ``reference``) is listed at ``/.well-known/revoked`` until it ends.
    revoked_by_jti: ClassVar[bool] = False
    #: Names a manifest's ``sandbox.env`` may not set: the ones its credentials set, or that would redirect them.
    reserved_env: ClassVar[frozenset[str]] = frozenset()
    #: Variables its clients read for the CAs they trust (pointed at a proxied session's CA bundle too).
    ca_env: ClassVar[tuple[str, ...]] = ()

    def __init__(self, name: str) -> None:
        self.name = name

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

    @classmethod
    def manual(cls) -> ProviderManual:
        """What docs/reference.md says of the type: the keys its loaders read, the hints its credentials set,
        the table ``broker init`` writes. By default the ``MANUAL`` of the ``manual`` module beside the
        class's own (``providers/x/manual.py`` for ``providers/x/provider.py``), imported when asked: no
        command but ``gen-docs`` and ``init`` needs it. (A credential's ``reference`` is something else: the
        provider's handle to revoke it, in the store and the log.)"""
        module = importlib.import_module(cls.__module__.rpartition(".")[0] + ".manual")
        manual: ProviderManual = module.MANUAL
        return manual

    @abstractmethod
    def mint(self, request: RequestT, context: MintContext) -> MintedCredential:
        """Mint the credential at the provider; raise ``ProviderError`` on failure."""

    @abstractmethod
    def revoke(self, target: RevokeTarget, now: datetime) -> RevokeOutcome:
        """Revoke at the provider; raise ``ProviderError`` when it cannot be done now."""

    def default_proxy_hosts(self) -> tuple[str, ...]:
        """``HOST:PORT`` the proxy puts this instance's secret in when the config names no ``proxy_hosts``
        (AWS: its region's STS and S3 hosts); none by default."""
        return ()

    def proxy_actions(self) -> Mapping[str, frozenset[str]]:
        """For a type whose proxy re-signs (``ProxyFacts.resigns``): the actions it re-signs, by the service that
        names them (AWS: ``{"sts": proxy_sts_actions}``); a service left out keeps the proxy's default. None by
        default."""
        return {}

    def health(self) -> list[Check]:
        """``broker doctor``'s checks of this instance (named locally: ``login``, ``clock``); mints nothing.

        Uses the broker's own identity only; a failed check says what to do in
        its ``fix``. Never raises for a provider problem, never puts a secret
        in a detail. The default checks nothing.
        """
        return []

    def close(self) -> None:
        """Release connections."""
