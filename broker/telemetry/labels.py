"""Label values a metric may carry: names the operator configured, at most ``cap`` of them, the rest ``other``.

A label's every distinct value is a time series in Prometheus, so the set
must stay small whatever the broker sees: provider instance names (from the
config, but also read back from a shared store another host writes), AWS
role names, a fixed set of decisions. ``Bounded`` admits the first ``cap``
well-formed values and answers ``other`` for everything after, and for any
value that is not a plain name (a session id never is one: they are not
passed here at all). Thread-safe: the daemon's connections and its sweep
record at once.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Final

OTHER: Final = "other"
#: Provider instance names as the config allows them (``[providers.NAME]``).
PROVIDER_NAME: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
#: IAM role names: letters, digits and ``+=,.@_-``, at most 64.
ROLE_NAME: Final = re.compile(r"[\w+=,.@-]{1,64}", re.ASCII)


class Bounded:
    """The values one label may take: the first ``cap`` that match ``pattern`` (or ``allowed``), then ``other``."""

    def __init__(self, cap: int, *, pattern: re.Pattern[str] | None = None, allowed: Iterable[str] = ()) -> None:
        self.cap = cap
        self._pattern = pattern
        self._allowed = frozenset(allowed)
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        """``value`` itself if it is admitted (now or before), else ``other``."""
        if value in self._seen or value in self._allowed:
            return value
        if self._pattern is None or value == OTHER or not self._pattern.fullmatch(value):
            return OTHER
        with self._lock:
            if value in self._seen:
                return value
            if len(self._seen) >= self.cap:
                return OTHER
            self._seen.add(value)
            return value

    def admitted(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._seen) | self._allowed


def role_name(role: str) -> str:
    """The role name of a role ARN (``arn:aws:iam::123:role/path/name`` -> ``name``); a name stays itself."""
    return role.rsplit("/", 1)[-1] if role.startswith("arn:") else role
