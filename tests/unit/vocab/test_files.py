"""The one private-file writer and the one bounded reader every caller shares (broker/vocab/files.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from broker.vocab.files import FileTooLarge, NotRegularFile, read_bounded, write_private_file


def test_write_private_file_replaces_a_planted_link_instead_of_writing_through_it(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("keep me")
    (tmp_path / "token").symlink_to(target)
    assert write_private_file(tmp_path, "token", b"secret", mode=0o400)
    assert target.read_text() == "keep me"
    info = os.lstat(tmp_path / "token")
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o400
    assert (tmp_path / "token").read_bytes() == b"secret"
    assert sorted(os.listdir(tmp_path)) == ["token", "victim"]  # no temporary left behind


def test_write_private_file_without_replace_keeps_the_file_already_there(tmp_path: Path) -> None:
    (tmp_path / "audit.key").write_bytes(b"first")
    assert not write_private_file(tmp_path, "audit.key", b"second", mode=0o400, replace=False)
    assert (tmp_path / "audit.key").read_bytes() == b"first"
    assert os.listdir(tmp_path) == ["audit.key"]


def test_write_private_file_refuses_a_name_that_leaves_the_directory(tmp_path: Path) -> None:
    for name in ("../escape", "", ".", ".."):
        with pytest.raises(ValueError):
            write_private_file(tmp_path, name, b"x", mode=0o400)
    assert os.listdir(tmp_path) == []


def test_read_bounded_refuses_a_fifo_without_waiting_for_a_writer(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(NotRegularFile):
        read_bounded(tmp_path / "fifo", 1024)


def test_read_bounded_refuses_more_than_its_limit_and_reads_exactly_the_limit(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 1025)
    with pytest.raises(FileTooLarge):
        read_bounded(tmp_path / "big", 1024)
    (tmp_path / "fits").write_bytes(b"x" * 1024)
    assert read_bounded(tmp_path / "fits", 1024)[0] == b"x" * 1024


def test_read_bounded_does_not_follow_a_link_when_told_not_to(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OSError):
        read_bounded(tmp_path / "link", 1024, follow_symlinks=False)
    assert read_bounded(tmp_path / "link", 1024)[0] == b"data"
