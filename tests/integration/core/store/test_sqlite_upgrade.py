"""An older SQLite store is brought up to date once, whoever opens it first.

A launcher's first commands after an upgrade may start together (an issue and
a sweep, two issues racing for the last room of a budget): each opens the store
and finds the columns a newer broker adds missing. The upgrade is one write
transaction, so the second process reads the columns only after the first has
added them, and neither fails adding one twice.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

from broker.core.store import open_store
from broker.core.store.sqlite import SqliteSessionStore

OPENERS = 8
#: The columns brokers since the first release added to ``sessions``, dropped again as an older broker left them.
ADDED = ("exec_bound", "manifest", "host", "requester_uid", "parent", "delegate_depth")


def _open(path: str, start: Any, errors: Any) -> None:
    start.wait()
    try:
        SqliteSessionStore(Path(path)).close()
    except Exception as exc:  # the test reports what any opener met
        errors.put(f"{type(exc).__name__}: {exc}")


def test_processes_opening_an_older_store_at_once_each_get_it_upgraded(tmp_path: Path) -> None:
    open_store(tmp_path).close()
    path = tmp_path / "sessions.db"
    with sqlite3.connect(path) as conn:
        conn.execute("DROP INDEX IF EXISTS sessions_parent")
        present = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
        for column in ADDED:
            if column in present:
                conn.execute(f"ALTER TABLE sessions DROP COLUMN {column}")
    for _ in range(5):  # each round starts from the older store again
        context = multiprocessing.get_context("fork")
        start, errors = context.Event(), context.Queue()
        openers = [context.Process(target=_open, args=(str(path), start, errors)) for _ in range(OPENERS)]
        for opener in openers:
            opener.start()
        start.set()
        for opener in openers:
            opener.join(60)
        met = [errors.get() for _ in range(errors.qsize())] if not errors.empty() else []
        assert met == [], met
        with sqlite3.connect(path) as conn:
            columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
            assert columns >= set(ADDED) & present
            conn.execute("DROP INDEX IF EXISTS sessions_parent")
            for column in ADDED:
                if column in present:
                    conn.execute(f"ALTER TABLE sessions DROP COLUMN {column}")
