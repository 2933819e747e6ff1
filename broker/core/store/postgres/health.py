"""``broker doctor`` of a shared store: it answers, its schema is this broker's, and this host's clock agrees with it.

Reached through the store's factory (``broker.core.store.shared_store_checks``), like every use of the
PostgreSQL store: doctor never imports it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from broker.core.inputs.config import Config
from broker.core.store.postgres.schema import SCHEMA_VERSION
from broker.core.store.postgres.store import PostgresSessionStore, shown_url
from broker.vocab.checks import Check
from broker.vocab.errors import BrokerError

#: More clock difference than this between this host and the shared store fails ``store.clock`` (seconds).
MAX_STORE_SKEW = 5.0


def store_checks(config: Config) -> list[Check]:
    """A shared store: it answers, its schema is this broker's, and this host's clock agrees with it."""
    assert config.store is not None
    fix = f"check store and store_passfile in {config.path}, and that the database accepts this host"
    try:
        store = PostgresSessionStore(config.store.url, host=config.host, passfile=config.store.passfile)
    except BrokerError as exc:
        return [Check("store.connection", False, exc.message, fix)]
    try:
        version = store.schema_version()
        before = datetime.now(UTC)
        server = store.server_time()
        after = datetime.now(UTC)
    except BrokerError as exc:
        return [Check("store.connection", False, exc.message, fix)]
    finally:
        store.close()
    skew = (server - (before + (after - before) / 2)).total_seconds()
    return [
        Check("store.connection", True, f"{shown_url(config.store.url)} (this host: {config.host})"),
        Check(
            "store.schema",
            version == SCHEMA_VERSION,
            f"schema version {version} (this broker: {SCHEMA_VERSION})",
            "" if version == SCHEMA_VERSION else "run the same broker version on every host",
        ),
        Check(
            "store.clock",
            abs(skew) <= MAX_STORE_SKEW,
            f"{skew:+.3f} s against the database server",
            "" if abs(skew) <= MAX_STORE_SKEW else "synchronise this host's clock (NTP): expiry is judged by it",
        ),
    ]
