"""The state directory's one check: the broker's own, not writable by others, before anything in it is read.

Its own module so that a cold command can check it before loading the core
(``broker.core.warming`` reads the store that early).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from broker.vocab.errors import StoreError

if TYPE_CHECKING:
    from broker.core.inputs.config import Config


def ensure_state_dir(config: Config) -> None:
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
