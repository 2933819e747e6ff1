"""The session store: what the broker remembers about sessions and credentials (no secrets); its factory.

The store the config names is opened here: PostgreSQL with ``store =
"postgresql://..."`` (``broker.core.store.postgres``), else SQLite in
``state_dir`` (``broker.core.store.sqlite``). Its records and the protocols
the core uses it through are ``broker.core.store.interface``. The state
directory gets its one check here too, before anything in it is read: a cold
command reads the store that early (``broker.core.warming``), so this module
stays light: a cold path (docs/architecture.md), the implementations are
imported when opened, psycopg only for a PostgreSQL store or a fleet's log.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from broker.vocab.errors import StoreError

if TYPE_CHECKING:
    from broker.audit.pglog import TableSource
    from broker.audit.room import LogRoom
    from broker.core.inputs.config import Config
    from broker.core.store.interface import SessionStore
    from broker.core.store.sqlite import SqliteSessionStore
    from broker.vocab.checks import Check


def ensure_state_dir(config: Config) -> None:
    """The state directory: the broker's own, not writable by others, before anything in it is read."""
    try:
        os.makedirs(config.state_dir, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"state_dir {config.state_dir}: {exc.strerror}") from None
    if not os.access(config.state_dir, os.W_OK | os.X_OK):
        raise StoreError(f"state_dir {config.state_dir} is not writable by this user")
    info = os.stat(config.state_dir)  # a symlink to another disk is fine; its target must be the broker's
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise StoreError(
            f"state_dir {config.state_dir} must be owned by the broker's user and not writable by group or others"
        )


def state_room(config: Config) -> LogRoom | None:
    """The room of the issuance log's file system (``[audit] min_free`` and the reserve kept for revoke and sweep);
    None in a fleet, whose log is the database's."""
    if config.store is not None:
        return None
    from broker.audit.room import LogRoom

    return LogRoom(config.state_dir, config.min_free)


def open_store(state_dir: Path) -> SqliteSessionStore:
    from broker.core.store.sqlite import SqliteSessionStore

    return SqliteSessionStore(state_dir / "sessions.db")


def open_config_store(config: Config) -> SessionStore:
    """The store the config names: PostgreSQL with ``store = "postgresql://..."``, else SQLite in state_dir."""
    if config.store is None:
        return open_store(config.state_dir)
    from broker.core.store.postgres.store import PostgresSessionStore

    return PostgresSessionStore(config.store.url, host=config.host, passfile=config.store.passfile)


def shared_store_checks(config: Config) -> list[Check]:
    """``broker doctor``'s lines for a shared store (``broker.core.store.postgres.health``); none for SQLite."""
    if config.store is None:
        return []
    from broker.core.store.postgres.health import store_checks

    return store_checks(config)


def has_store(config: Config) -> bool:
    """Whether there is a store to read without creating one (a shared store always exists)."""
    return config.store is not None or (config.state_dir / "sessions.db").is_file()


@contextlib.contextmanager
def read_fleet_log(url: str, passfile: Path | None = None) -> Iterator[TableSource]:
    """A fleet's issuance log, read-only (``broker.core.store.postgres.fleet_log``): psycopg is loaded only here."""
    from broker.core.store.postgres.fleet_log import read_fleet_log as read

    with read(url, passfile) as source:
        yield source
