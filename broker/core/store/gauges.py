"""The session store's answer to a metrics scrape (``broker.telemetry.scrape.StoreGauges``), in one statement.

One ``SELECT`` of four counting parts joined by ``UNION ALL``, the same
SQL for SQLite and PostgreSQL: the live sessions (``COUNT`` over the state
index), the pending revocations by provider (``GROUP BY`` over the
credentials' state index), the approval requests waiting for a decision
(``COUNT`` over the approvals' state index) and the oldest checkpoint still
waiting for the witness (``MIN``; in a fleet, this host's). No row is loaded, so a scrape
costs the same with ten sessions or ten thousand (docs/metrics.md has the
figure). It runs on the store's own connection through ``run_step``, under
the store's lock, as every other step does; a database error is the store's
one-line ``StoreError``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from broker.core.store.states import LIVE_SESSION_STATES, ApprovalState, CredentialState
from broker.telemetry.scrape import StoreCounts
from broker.vocab.errors import StoreError
from broker.vocab.time import parse_iso

if TYPE_CHECKING:
    from broker.core.store.interface import SessionStore

_LIVE = ", ".join(f"'{state}'" for state in LIVE_SESSION_STATES)  # the enum's own values: no input
_COUNTS = (
    f"SELECT 'live', '', COUNT(*) FROM sessions WHERE state IN ({_LIVE})"  # noqa: S608 - constants only
    f" UNION ALL SELECT 'pending', provider, COUNT(*) FROM credentials WHERE state = '{CredentialState.PENDING}'"
    " GROUP BY provider"
    f" UNION ALL SELECT 'approvals', '', COUNT(*) FROM approvals WHERE state = '{ApprovalState.PENDING}'"
    " UNION ALL SELECT 'witness', MIN(created_at), 0 FROM witness_pending"
)
_HOST = {"?": " WHERE host = ?", "%s": " WHERE host = %s"}


@runtime_checkable
class Steps(Protocol):
    """A store that runs a step on its own connection, as both implementations do."""

    shared: bool

    @abstractmethod
    def run_step(self, step: Callable[[Any], Any]) -> Any: ...


class StoreGaugeReader:
    """``broker.telemetry.scrape.StoreGauges`` over the session store (SQLite or PostgreSQL)."""

    def __init__(self, store: SessionStore | Steps) -> None:
        if not isinstance(store, Steps):
            raise TypeError(f"{type(store).__name__} cannot run a step on its connection")
        self._store = store
        host = str(getattr(store, "host", "")) if store.shared else ""
        marker = "%s" if store.shared else "?"
        self._sql = _COUNTS + (_HOST[marker] if host else "")
        self._args: tuple[str, ...] = (host,) if host else ()

    def gauge_counts(self) -> StoreCounts:
        rows: list[Any] = self._store.run_step(lambda conn: list(conn.execute(self._sql, self._args).fetchall()))
        live, pending, oldest, approvals = 0, dict[str, int](), None, 0
        for kind, key, count in rows:
            if kind == "live":
                live = int(count)
            elif kind == "approvals":
                approvals = int(count)
            elif kind == "pending":
                pending[str(key)] = int(count)
            elif kind == "witness" and key:
                try:
                    oldest = parse_iso(str(key))
                except ValueError:
                    raise StoreError("session store: a witness checkpoint has a malformed time") from None
        return StoreCounts(
            live_sessions=live, pending_revocations=pending, oldest_witness_pending=oldest, approvals_pending=approvals
        )
