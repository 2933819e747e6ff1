"""``state_dir`` and ``runtime_dir``: the broker's own directories, never one that other software or a user shares.

``sweep`` empties what it finds in ``runtime_dir`` and the broker keeps its
keys, store and log in ``state_dir``, so neither may be a shared system
directory (``/``, ``/tmp``, ``/run``, ...), a directory under ``/home`` or a
user's home directory, named directly or through a symbolic link. The config
(``broker.core.inputs.config``) and ``broker init`` (``broker.core.setup.install``)
both check here.
"""

from __future__ import annotations

import pwd
from pathlib import Path

from broker.vocab.errors import ConfigError
from broker.vocab.fields import shown

# Directories other software shares: sweep empties what it finds in runtime_dir, so neither may be one.
SHARED_DIRECTORIES = ("/", "/run", "/tmp", "/var/run", "/dev/shm", "/var/tmp", "/home", "/root")
FIRST_USER_UID = 1000
NOBODY_UID = 65534


def check_own_directory(key: str, path: Path) -> Path:
    """``path`` unless it is (or resolves to) a shared system directory or a home directory."""
    try:
        resolved = path.resolve()
        shared = {Path(d) for d in SHARED_DIRECTORIES} | {Path(d).resolve() for d in SHARED_DIRECTORIES}
        homes = _home_directories()
    except (OSError, RuntimeError):  # a symbolic link loop
        raise ConfigError(f"{key}: {shown(str(path), 80)} cannot be resolved (a symbolic link loop?)") from None
    if resolved in shared or path in shared or resolved.parent == Path("/home") or resolved in homes:
        via = "" if resolved == path else f" (resolves to {shown(str(resolved), 80)})"
        raise ConfigError(
            f"{key}: {shown(str(path), 80)}{via} is a shared system or home directory;"
            " give the broker a directory of its own"
        )
    return path


def _home_directories() -> set[Path]:
    """The home directories of root and of every user account (uid 1000 and up, but not nobody)."""
    accounts = [e for e in pwd.getpwall() if e.pw_uid == 0 or FIRST_USER_UID <= e.pw_uid < NOBODY_UID]
    return {Path(e.pw_dir).resolve() for e in accounts if e.pw_dir.startswith("/") and e.pw_dir != "/nonexistent"}


def resolve_path(base: Path, value: str) -> Path:
    path = Path(value)
    return path if path.is_absolute() else (base / path)
