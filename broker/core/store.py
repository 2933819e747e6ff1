"""The session store: what the broker remembers about sessions and credentials (no secrets).

``SessionStore`` is the small interface the core uses; ``SqliteSessionStore``
(``broker.core.sqlite_store``) is the embedded implementation in
``state_dir/sessions.db`` (WAL, one transaction per step, synchronous=FULL so
each step is durable before the next begins). A credential is recorded as ``minting`` before the provider
call (with what its reference will hold that is known before: an AWS session
name) and ``active`` with its non-secret reference after, so nothing minted
is ever forgotten.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.core.states import LIVE_SESSION_STATES, UNSETTLED_CREDENTIAL_STATES, CredentialState, SessionState

if TYPE_CHECKING:
    from broker.audit.keys import AuditKeys
    from broker.audit.log import AppendLog
    from broker.core.config import Config
    from broker.core.sqlite_store import SqliteSessionStore
    from broker.vocab.holding import Lock
    from providers.capabilities import FleetState

SESSION_STATES = tuple(SessionState)
CREDENTIAL_STATES = tuple(CredentialState)
__all__ = ["LIVE_SESSION_STATES", "UNSETTLED_CREDENTIAL_STATES", "CredentialState", "SessionState"]


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
    manifest: Mapping[str, Any] | None = None  # {"json": bool, "text": str}: the manifest it was issued for
    host: str = ""  # the broker host holding its directory (config ``host``); only it touches the directory


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


class SessionStore(ABC):
    """What the core needs from a session store."""

    #: Whether brokers on other hosts share it (fleet mode): sessions then name their ``host``.
    shared: bool = False

    @abstractmethod
    def create_session(self, record: SessionRecord) -> None: ...

    @abstractmethod
    def set_session_state(self, session_id: str, state: SessionState) -> None: ...

    @abstractmethod
    def retire_credential(self, session_id: str, name: str, retired_name: str) -> None:
        """Rename a credential that a renewal replaces; it stays until it is revoked."""

    @abstractmethod
    def mark_exec_bound(self, session_id: str) -> None:
        """The session ends with the ``broker exec`` that holds its lock."""

    @abstractmethod
    def set_session_document(self, session_id: str, document: Mapping[str, Any]) -> None: ...

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
    def get_session(self, session_id: str) -> SessionRecord | None: ...

    @abstractmethod
    def credentials(self, session_id: str) -> list[CredentialRecord]: ...

    @abstractmethod
    def sessions(
        self, *, states: tuple[SessionState, ...] | None = None, task: str | None = None
    ) -> list[SessionRecord]: ...

    @abstractmethod
    def live_credentials(self, provider: str, now: datetime) -> list[CredentialRecord]:
        """The provider's credentials that have not expired by ``now``, revoked or not (never minted: left out)."""

    @abstractmethod
    def unsettled_credentials(self) -> list[CredentialRecord]:
        """Every credential that may still be valid at its provider (minting, active, pending)."""

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

    @abstractmethod
    def add_witness_pending(self, seq: int, record_hash: str, body: str, created_at: str, *, only: bool) -> None:
        """Keep a checkpoint for the witness until written (``only``: drop older pending ones)."""

    @abstractmethod
    def witness_pending(self) -> list[tuple[int, str, str, str]]:
        """Pending checkpoints, oldest first: (seq, hash, body, created_at)."""

    @abstractmethod
    def drop_witness_pending(self, seq: int) -> None: ...

    @abstractmethod
    def set_witness_status(self, *, success_at: str | None, error: str | None) -> None: ...

    @abstractmethod
    def witness_status(self) -> dict[str, str | None]: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the connection."""

    def shared_lock(self, name: str) -> Lock | None:
        """A lock every broker sharing this store honours (fleet mode); None: this host's file locks do."""
        return None

    def issuance_log(self, keys: AuditKeys) -> AppendLog | None:
        """The fleet's issuance log kept in this store; None: the file log in ``state_dir`` (one host)."""
        return None

    def fleet_state(self) -> FleetState | None:
        """What providers share with brokers on other hosts through this store; None for a one-host store."""
        return None


def open_store(state_dir: Path) -> SqliteSessionStore:
    from broker.core.sqlite_store import SqliteSessionStore

    return SqliteSessionStore(state_dir / "sessions.db")


def open_config_store(config: Config) -> SessionStore:
    """The store the config names: PostgreSQL with ``store = "postgresql://..."``, else SQLite in state_dir."""
    if config.store is None:
        return open_store(config.state_dir)
    from broker.core.postgres_store import PostgresSessionStore

    return PostgresSessionStore(config.store.url, host=config.host, passfile=config.store.passfile)


def has_store(config: Config) -> bool:
    """Whether there is a store to read without creating one (a shared store always exists)."""
    return config.store is not None or (config.state_dir / "sessions.db").is_file()
