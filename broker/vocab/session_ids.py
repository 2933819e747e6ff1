"""Session ids: one shape, checked wherever an id comes from outside the broker.

An id names a directory under ``runtime_dir`` and a lock file under
``state_dir``, so an id the broker did not make (``../../x``, ``/etc/x``)
is refused before any path is built from it.
"""

from __future__ import annotations

import re

from broker.vocab.errors import UsageError
from broker.vocab.fields import shown

SESSION_ID = re.compile(r"s-[a-z0-9]{12,32}")


def is_session_id(value: str) -> bool:
    return SESSION_ID.fullmatch(value) is not None


def check_session_id(value: str, what: str = "--session") -> str:
    """``value`` when it has the shape of a session id; otherwise a usage error (exit 2)."""
    if not is_session_id(value):
        raise UsageError(f"{what} {shown(value)} is not a session id (s- and 12 to 32 lower-case letters or digits)")
    return value
