"""The places the filesystem attacks use: a runtime dir on the host's /dev/shm tmpfs, and a directory outside
every session on the same tmpfs (so renames and links between them work), both removed whatever they became.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.host import mounts
from broker.host.sessiondir import remove_session_path


def _scrub(path: Path) -> None:
    """Remove ``path`` whatever it is (a runtime dir with sealed sessions, a symlink, a mount)."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not path.is_dir():
        path.unlink()
        return
    for child in list(path.iterdir()):
        if child.is_symlink() or not child.is_dir():
            child.unlink()
        else:
            remove_session_path(path, child.name)
    if mounts.is_mount_point(path):
        mounts.unmount(path)
    path.rmdir()


@pytest.fixture
def shm_dir(tmp_path: Path) -> Iterator[Path]:
    """A runtime dir on the host's /dev/shm tmpfs, for the no-mount mode."""
    path = Path("/dev/shm") / f"broker-fs-{tmp_path.name}"
    yield path
    _scrub(path)


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[Path]:
    """A directory outside every session, on the same tmpfs as ``shm_dir`` (so renames and links work)."""
    path = Path("/dev/shm") / f"broker-fs-{tmp_path.name}-outside"
    path.mkdir(mode=0o777)
    yield path
    if mounts.is_mount_point(path):
        mounts.unmount(path)
    shutil.rmtree(path)
