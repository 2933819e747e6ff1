"""The session store's records and the small protocols the core uses it through (no secrets kept).

A user of the store depends on the part it uses: ``Sessions`` and
``Credentials`` (the records, both together ``Records``), ``LogHead`` (the
issuance log's signed head and how far its chain was checked),
``WitnessQueue`` (checkpoints waiting for the witness, declared by
``broker.audit.witness``) and ``Fleet`` (what brokers on other hosts share).
``SessionStore`` is all of them, as the two implementations are:
``broker.core.store.sqlite`` (embedded, in ``state_dir/sessions.db``) and
``broker.core.store.postgres`` (one store for a fleet); the factory is
``broker.core.store``. A credential is recorded as ``minting`` before the
provider call (with what its reference will hold that is known before: an AWS
session name) and ``active`` with its non-secret reference after, so nothing
minted is ever forgotten.
Rows are checked as they are read (``broker.core.store.rows``): a malformed one is
skipped and noted in ``malformed`` (``MalformedReports``), never a reason to stop.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from broker.audit.witness import WitnessQueue
from broker.core.store.states import (
    LIVE_SESSION_STATES,
    UNSETTLED_CREDENTIAL_STATES,
    ApprovalState,
    CredentialState,
    SessionState,
)

if TYPE_CHECKING:
    from broker.audit.keys import AuditKeys
    from broker.audit.log import AppendLog
    from broker.core.store.rows import MalformedRows
    from broker.vocab.holding import Lock
    from providers.capabilities import FleetState

SESSION_STATES = tuple(SessionState)
CREDENTIAL_STATES = tuple(CredentialState)
__all__ = ["LIVE_SESSION_STATES", "UNSETTLED_CREDENTIAL_STATES", "ApprovalState", "CredentialState", "SessionState"]


@dataclass(frozen=True)
class SessionRecord:
    id: str
    task: str
    requester: str
    state: SessionState
    created_at: datetime
    expires_at: datetime
    dir: str
    mount_path: str
    uid: int
    gid: int
    mounted: bool
    document: Mapping[str, Any] | None
    exec_bound: bool = False  # revoked when its `broker exec` ends (sweep does it if that broker died)
    #: {"json": bool, "text": str, "network_rule": str | None}: the manifest it was issued for, and the rule whose
    #: network allowed its destinations (``Manifest.stored``; an older broker wrote no rule)
    manifest: Mapping[str, Any] | None = None
    host: str = ""  # the broker host holding its directory (config ``host``); only it touches the directory
    requester_uid: int | None = None  # the requester's uid on ``host`` (None: a row an older broker wrote)
    parent: str | None = None  # the session it was delegated from (revoked with it); None: issued by policy
    delegate_depth: int = 0  # levels of children it may still ask for through its socket (0: none)


@dataclass(frozen=True)
class CredentialRecord:
    session_id: str
    name: str
    provider: str
    type: str
    state: CredentialState
    reference: Mapping[str, str]
    scope: Mapping[str, Any]
    expires_at: datetime | None
    fingerprint: str | None


class Sessions(Protocol):
    """The sessions: created ``issuing``, given their document, moved through their states."""

    #: Whether brokers on other hosts share it (fleet mode): sessions then name their ``host``.
    shared: bool = False
    #: The malformed rows its reads skipped (set by each store when it opens).
    malformed: MalformedRows

    @abstractmethod
    def create_session(self, record: SessionRecord) -> None: ...

    @abstractmethod
    def set_session_state(self, session_id: str, state: SessionState) -> None: ...

    @abstractmethod
    def mark_exec_bound(self, session_id: str) -> None:
        """The session ends with the ``broker exec`` that holds its lock."""

    @abstractmethod
    def set_session_document(self, session_id: str, document: Mapping[str, Any]) -> None: ...

    @abstractmethod
    def get_session(self, session_id: str) -> SessionRecord | None: ...

    @abstractmethod
    def sessions(
        self,
        *,
        states: tuple[SessionState, ...] | None = None,
        task: str | None = None,
        unknown_states: bool = False,
    ) -> list[SessionRecord]:
        """Sessions in ``states`` (all without); ``unknown_states``: rows in a state no broker writes are read
        too, so they are noted as malformed (``sweep`` reports them)."""


@dataclass(frozen=True)
class ApprovalRecord:
    """An approval request: the session ``request`` (``awaiting-approval`` until it is decided) and its decision.

    ``digest`` binds a decision to what was asked: the SHA-256 of the canonical
    manifest and the policy's decision (``summary`` holds both, as the approver
    sees them). ``expires_at`` is when it must be decided by (``pending``), or
    collected by once ``granted``.
    """

    request: str
    task: str
    requester: str
    requester_uid: int | None
    state: ApprovalState
    digest: str
    summary: Mapping[str, Any]
    approvers: tuple[tuple[str, ...], ...]  # per rule that asked: ``uid:N`` or ``group:NAME``
    timeout: int  # seconds to decide, and then to collect
    created_at: datetime
    expires_at: datetime
    host: str = ""
    decided_at: datetime | None = None
    decided_by: str | None = None  # the approver (or the requester who withdrew it), as ``str(Requester)``
    decided_by_uid: int | None = None
    reason: str | None = None  # a denial's reason as the approver gave it (one bounded line)


class Approvals(Protocol):
    """Approval requests, each with its ``awaiting-approval`` session: made together, decided once."""

    @abstractmethod
    def create_approval(self, session: SessionRecord, approval: ApprovalRecord) -> None:
        """The session (``awaiting-approval``) and its request, in one transaction."""

    @abstractmethod
    def get_approval(self, request: str) -> ApprovalRecord | None: ...

    @abstractmethod
    def approvals(self, states: tuple[ApprovalState, ...]) -> list[ApprovalRecord]:
        """The requests in ``states``, oldest first."""

    @abstractmethod
    def decide_approval(
        self,
        request: str,
        *,
        was: tuple[ApprovalState, ...],
        now: ApprovalState,
        at: datetime,
        expires_at: datetime | None = None,
        by: str | None = None,
        by_uid: int | None = None,
        reason: str | None = None,
        session_state: SessionState | None = None,
    ) -> bool:
        """Move the request from one of ``was`` to ``now`` (and its session to ``session_state``) in one
        transaction; False when another caller moved it first."""

    @abstractmethod
    def collect_approval(self, session: SessionRecord) -> bool:
        """A ``granted`` request becomes ``collected`` and its session ``issuing`` as ``session`` says, in one
        transaction; False when it was not ``granted`` (collected already, expired, withdrawn)."""

    @abstractmethod
    def children(self, parent: str) -> list[SessionRecord]:
        """The sessions delegated from ``parent``, in any state."""


class Credentials(Protocol):
    """Each session's credentials: recorded before the provider call, then minted, revoked or left pending."""

    @abstractmethod
    def add_credential(
        self, session_id: str, name: str, provider: str, type_name: str, planned: Mapping[str, str]
    ) -> None:
        """Record a credential as ``minting``; ``planned`` is the part of its reference known before the call."""

    @abstractmethod
    def credential_minted(
        self,
        session_id: str,
        name: str,
        *,
        reference: Mapping[str, str],
        scope: Mapping[str, Any],
        expires_at: datetime,
        fingerprint: str,
    ) -> None: ...

    @abstractmethod
    def set_credential_state(self, session_id: str, name: str, state: CredentialState) -> None: ...

    @abstractmethod
    def retire_credential(self, session_id: str, name: str, retired_name: str) -> None:
        """Rename a credential that a renewal replaces; it stays until it is revoked."""

    @abstractmethod
    def credentials(self, session_id: str) -> list[CredentialRecord]: ...

    @abstractmethod
    def live_credentials(self, provider: str, now: datetime) -> list[CredentialRecord]:
        """The provider's credentials that have not expired by ``now``, revoked or not (never minted: left out)."""

    @abstractmethod
    def unsettled_credentials(self) -> list[CredentialRecord]:
        """Every credential that may still be valid at its provider (minting, active, pending)."""


class MalformedReports(Protocol):
    """The rows a store's reads skipped because they failed their checks, and reporting each once."""

    #: The malformed rows its reads skipped (set by each store when it opens).
    malformed: MalformedRows

    @abstractmethod
    def claim_report(self, digest: str) -> bool:
        """Whether this call is the first to report the malformed row ``digest`` (in a shared store: of the
        fleet), so each is recorded once in the issuance log."""


class Records(Sessions, Credentials, Protocol):
    """Sessions with their credentials: what ``status`` and ``audit active`` read."""


class LogHead(Protocol):
    """What the store remembers of the issuance log: its last signed head and how far its chain was checked."""

    @abstractmethod
    def set_log_head(self, seq: int, record_hash: str) -> None:
        """Remember the last signed head of the issuance log (detects truncation)."""

    @abstractmethod
    def log_head(self) -> tuple[int, str] | None: ...

    @abstractmethod
    def set_checked_prefix(self, log: str, document: dict[str, Any]) -> None:
        """Remember how far ``log``'s chain was checked (offset, last record, SHA-256 of the bytes)."""

    @abstractmethod
    def checked_prefix(self, log: str) -> dict[str, Any] | None: ...


class Fleet(Protocol):
    """What brokers on other hosts share through the store; a one-host store shares nothing."""

    def shared_lock(self, name: str) -> Lock | None:
        """A lock every broker sharing this store honours (fleet mode); None: this host's file locks do."""
        return None

    def issuance_log(self, keys: AuditKeys) -> AppendLog | None:
        """The fleet's issuance log kept in this store; None: the file log in ``state_dir`` (one host)."""
        return None

    def fleet_state(self) -> FleetState | None:
        """What providers share with brokers on other hosts through this store; None for a one-host store."""
        return None

    def fleet_revokes(self) -> FleetRevokes | None:
        """Asking the host that holds a session to finish revoking it (fleet mode); None for a one-host store."""
        return None


class RevokeListener(Protocol):
    """A connection of its own on which a host's daemon hears revokes of sessions (any host's: it checks)."""

    @abstractmethod
    def heard(self, timeout: float) -> list[str]:
        """The session ids announced since the last call, waiting up to ``timeout`` for one; a StoreError when the
        connection is lost (the caller opens another)."""

    @abstractmethod
    def close(self) -> None: ...


class FleetRevokes(Protocol):
    """A revoke of a session another host holds: that host is asked, through the store, to finish what only it can
    (a GitHub token its keep-safe holds, the session's tmpfs, a running exec), and says when it has."""

    @abstractmethod
    def ask(self, session_id: str, holder: str) -> bool:
        """Record the ask and announce it (LISTEN/NOTIFY, the session id only); whether ``holder``'s daemon listens."""

    @abstractmethod
    def answered(self, session_ids: Collection[str]) -> dict[str, bool]:
        """The asked sessions whose holder has finished, each with whether it removed the session's directory."""

    @abstractmethod
    def waiting(self) -> list[str]:
        """The sessions this host was asked to finish and has not yet (its daemon was down, say)."""

    @abstractmethod
    def finished(self, session_id: str, *, dir_removed: bool) -> None:
        """This host did what only it can for ``session_id``."""

    @abstractmethod
    def listen(self) -> RevokeListener:
        """Hear the asks as they are made; while it is open, other hosts see this host's daemon listening."""


class SessionStore(Records, Approvals, MalformedReports, LogHead, WitnessQueue, Fleet, Protocol):
    """The whole store, as its implementations provide it and the ``Broker`` holds it."""

    def close(self) -> None:
        """Release the connection."""
