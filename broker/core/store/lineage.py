"""A delegated session's ancestors, read from the store: where its directory is, which sessions it ends with."""

from __future__ import annotations

from broker.core.store.interface import SessionRecord, Sessions

MAX_DEPTH = 16  # deeper than any delegate_depth allows: a loop in damaged rows stops here


def ancestors(store: Sessions, record: SessionRecord) -> tuple[str, ...]:
    """The sessions above ``record``, the topmost first (empty for a session issued by policy).

    Only session ids read back from rows (each checked to be one) name the
    path: ``runtime_dir/<top>/children/.../<record>``. A chain broken by a
    row that is gone ends where it breaks; its directories went with the
    topmost one's tmpfs.
    """
    chain: list[str] = []
    current = record
    while current.parent is not None and len(chain) < MAX_DEPTH and current.parent not in chain:
        chain.append(current.parent)
        found = store.get_session(current.parent)
        if found is None:
            break
        current = found
    return tuple(reversed(chain))
