"""The policy a long-lived process decides with: read again when its files change, and at least every so often.

A command decides once and ends, so it reads the policy once. A running
``exec`` (and the daemon holding one) decides for hours: its renewals, a
``kind: secret``'s new versions, the children its sandbox asks for, ``session
allow``. An operator who withdraws a grant must not wait for the exec to
end. ``PolicySource.current`` is asked at each decision: it looks at the
files (the directory's entries, and each policy file's inode, size, mtime
and ctime: a ``stat`` each, nothing read) and parses them again only when
something changed, or when the policy in hand is older than ``refresh``
seconds (``[egress] policy_refresh``: a change a coarse file clock hides is
seen by then). A policy that no longer loads fails every decision until it
is fixed (fail closed); its error is kept with the files' stamp, so a broken
file is not parsed again at each decision.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from broker.core.inputs.config import Config
from broker.core.inputs.policy import Policy, load_policy
from broker.vocab.errors import PolicyFileError

#: What a policy directory looks like from its metadata alone: each file's name and what ``stat`` says of it.
Stamp = tuple[tuple[str, int, int, int, int, int], ...] | None
SUFFIXES = (".yaml", ".yml")


def stamp_of(directory: Path) -> Stamp:
    """The names, devices, inodes, sizes, mtimes and ctimes of the policy files in ``directory`` (None: none there)."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return None
    files = []
    for entry in entries:
        if not entry.name.endswith(SUFFIXES):
            continue
        try:
            info = entry.stat()  # a link is followed, as loading does
        except OSError:
            files.append((entry.name, -1, -1, -1, -1, -1))  # gone meanwhile: loading says what is wrong
            continue
        files.append((entry.name, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns))
    return tuple(sorted(files))


class PolicySource:
    """The policy in ``directory`` as its files say now (see the module docstring); safe to share between threads."""

    def __init__(
        self, directory: Path, config: Config, refresh: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.directory = directory
        self.config = config
        self.refresh = refresh
        self.clock = clock
        self.loads = 0  # how often the files were parsed
        self._lock = threading.Lock()
        self._stamp: Stamp = None
        self._read_at: float | None = None
        self._policy: Policy | None = None
        self._error: PolicyFileError | None = None

    def current(self) -> Policy:
        """The policy; parsed again when its files changed or it is ``refresh`` seconds old (a broken one raises)."""
        stamp = stamp_of(self.directory)  # before reading: a change while it is read is seen at the next decision
        with self._lock:
            fresh = self._read_at is not None and self.clock() - self._read_at < self.refresh
            if not (fresh and stamp == self._stamp):
                self._read(stamp)
            if self._error is not None:
                raise PolicyFileError(self._error.message)
            assert self._policy is not None
            return self._policy

    def _read(self, stamp: Stamp) -> None:
        self._stamp, self._read_at = stamp, self.clock()
        self.loads += 1
        try:
            self._policy, self._error = load_policy(self.directory, self.config), None
        except PolicyFileError as exc:
            self._policy, self._error = None, exc
