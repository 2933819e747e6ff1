"""``sweep`` removes only the broker's own: an entry of ``runtime_dir`` that is not provably a broker session
directory (planted links, foreign directories and mounts, look-alike names) is reported as ``foreign`` and
left alone.
"""

from __future__ import annotations

import os
from pathlib import Path

from broker.host import mounts
from broker.host.libc import libc
from tests.security.filesystem.targets import CANARY, snapshot, vault_env

MS_BIND = 4096


def test_sweep_leaves_alone_and_reports_what_is_not_provably_a_broker_session(tmp_path: Path, outside: Path) -> None:
    env = vault_env(tmp_path)
    run = env.runtime_dir
    run.mkdir(mode=0o711)
    (outside / "precious").write_text(CANARY)
    (outside / "session.json").write_text('{"session": "s-eeeeeeeeeeee"}')
    (run / "project").mkdir()
    (run / "project" / "data.txt").write_text("someone else's")
    (run / "notes.txt").write_text("someone else's")
    (run / "link").symlink_to(outside)
    (run / "s-aaaaaaaaaaaa").mkdir()  # the shape of a session id, but nothing proves it is one
    (run / "s-aaaaaaaaaaaa" / "data.txt").write_text("someone else's")
    (run / "s-bbbbbbbbbbbb").mkdir()  # a session.json naming another session
    (run / "s-bbbbbbbbbbbb" / "session.json").write_text('{"session": "s-cccccccccccc"}')
    (run / "s-dddddddddddd").symlink_to(outside)
    (run / "s-eeeeeeeeeeee").mkdir()  # its session.json is a symbolic link to one naming it
    (run / "s-eeeeeeeeeeee" / "session.json").symlink_to(outside / "session.json")
    (run / "s-nothex-with-dash").mkdir()
    planted = sorted(os.listdir(run))
    mounted: list[Path] = []
    if os.geteuid() == 0:
        other_tmpfs = run / "s-ffffffffffff"  # a tmpfs, but not one the broker mounts
        other_tmpfs.mkdir()
        mounts.mount_tmpfs(other_tmpfs, size="1m", mode=0o700, uid=0, gid=0)
        mounted.append(other_tmpfs)
        (other_tmpfs / "data.txt").write_text("someone else's")
        bound = run / "s-gggggggggggg"  # another directory bound here, holding a session.json naming it
        bound.mkdir()
        (outside / "bound").mkdir()
        (outside / "bound" / "session.json").write_text('{"session": "s-gggggggggggg"}')
        assert libc().mount(os.fsencode(outside / "bound"), os.fsencode(bound), None, MS_BIND, None) == 0
        mounted.append(bound)
        planted = sorted(os.listdir(run))
    before, outside_before = snapshot(run), snapshot(outside)
    try:
        result = env.run("sweep", "--json")
        assert result.code == 0, result.stderr
        assert result.json()["foreign"] == planted and result.json()["orphans_removed"] == []
        human = env.run("sweep")
        assert human.code == 0 and f"foreign {len(planted)}" in human.stdout
        assert all(f"foreign, left alone: '{name}'" in human.stdout for name in planted)
        assert snapshot(run) == before and snapshot(outside) == outside_before
        assert all(mounts.is_mount_point(path) for path in mounted)
    finally:
        for path in mounted:
            if mounts.is_mount_point(path):
                mounts.unmount(path)
