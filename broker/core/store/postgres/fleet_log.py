"""Reading the fleet's issuance log as an auditor: a read-only connection to the store, no migration, no write.

``audit verify --store URL``, ``audit export`` and the fleet side of ``audit
list``/``lookup`` read the ``issuance_log`` table through this connection
(``default_transaction_read_only``), so an auditor's login needs only SELECT.
The password comes from a pgpass file (the config's ``store_passfile``, else
libpq's ``PGPASSFILE`` or ``~/.pgpass``), never from the URL; errors name the
URL without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import psycopg

from broker.audit.pglog import TableSource
from broker.core.inputs.store_url import SHAPE, store_url_problem
from broker.core.store.postgres.locks import first_line
from broker.core.store.postgres.store import CONNECT_TIMEOUT, shown_url
from broker.vocab.errors import BadInput, StoreError


def check_store_url(url: str, option: str = "--store") -> None:
    problem = store_url_problem(url)
    if problem == SHAPE:
        raise BadInput(f"{option}: {problem}")
    if problem:
        raise BadInput(f"{option}: {problem}; put it in a pgpass file (PGPASSFILE or ~/.pgpass)")


@contextlib.contextmanager
def read_fleet_log(url: str, passfile: Path | None = None) -> Iterator[TableSource]:
    """The fleet's log at ``url``, read-only, closed on exit."""
    check_store_url(url)
    where = shown_url(url)
    options: dict[str, object] = {
        "connect_timeout": CONNECT_TIMEOUT,
        "autocommit": True,
        "application_name": "broker-audit",
        "options": "-c default_transaction_read_only=on",
    }
    if passfile is not None:
        options["passfile"] = str(passfile)
    try:
        connection = psycopg.connect(url, **options)  # type: ignore[arg-type]
    except psycopg.Error as exc:
        raise StoreError(f"issuance log {where}: cannot connect: {first_line(exc)}") from None
    try:
        yield TableSource(connection, where)
    finally:
        connection.close()
