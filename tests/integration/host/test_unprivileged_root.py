"""Root without CAP_SYS_ADMIN (a broker in an unprivileged container) with ``mount_tmpfs = "auto"``.

Whether the broker mounts a tmpfs per session is decided by the capability,
not the uid: such a broker cannot mount, so it uses ``runtime_dir`` as is
when that is a tmpfs. The broker runs here under ``setpriv`` with
CAP_SYS_ADMIN removed from its bounding set, against the real OpenBao dev
server and a ``runtime_dir`` the test mounted as a tmpfs.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.host import mounts
from tests.fixtures.brokerenv import BrokerEnv, Result, make_env
from tests.fixtures.openbao import VAULT_TASK, OpenBao, add_vault_provider

SETPRIV = shutil.which("setpriv")
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(
        os.geteuid() != 0 or not mounts.can_mount() or SETPRIV is None,
        reason="needs root with CAP_SYS_ADMIN (to mount the test's tmpfs) and setpriv (to drop it for the broker)",
    ),
]
ROOT = Path(__file__).resolve().parents[3]


def without_sys_admin(*command: str) -> list[str]:
    assert SETPRIV is not None
    return [SETPRIV, "--inh-caps=-sys_admin", "--bounding-set=-sys_admin", "--", *command]


def run_broker(env: BrokerEnv, *args: str) -> Result:
    command = without_sys_admin(sys.executable, "-m", "broker.cli", "--config", str(env.config_path), *args)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    return Result(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def tmpfs_env(tmp_path: Path, openbao: OpenBao) -> Iterator[BrokerEnv]:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o711)
    mounts.mount_tmpfs(runtime, size="16m", mode=0o711, uid=0, gid=0)
    try:
        env = make_env(tmp_path, runtime_dir=runtime)
        add_vault_provider(env, openbao)
        try:
            yield env
        finally:
            env.cleanup()
    finally:
        mounts.unmount(runtime)


def test_the_broker_really_runs_without_cap_sys_admin() -> None:
    probe = "import os; from broker.host import mounts; print(os.geteuid(), mounts.can_mount())"
    done = subprocess.run(
        without_sys_admin(sys.executable, "-c", probe), capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.split() == ["0", "False"]


def test_root_without_cap_sys_admin_issues_into_a_tmpfs_runtime_dir(tmpfs_env: BrokerEnv, openbao: OpenBao) -> None:
    assert tmpfs_env.settings.get("mount_tmpfs", "auto") == "auto"
    issued = run_broker(tmpfs_env, "issue", "--task", str(tmpfs_env.write_task(VAULT_TASK)), "--json")
    assert issued.code == 0, issued.stderr
    document = json.loads(issued.stdout)
    directory = Path(document["dir"])
    assert directory.parent == tmpfs_env.runtime_dir
    assert mounts.is_tmpfs(directory) and not mounts.is_mount_point(directory)  # the runtime_dir's tmpfs, as is
    info = os.stat(directory)
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (1000, 1000, 0o500)
    token = directory / "kv" / "token"
    token_info = os.stat(token)
    assert (token_info.st_uid, stat.S_IMODE(token_info.st_mode)) == (1000, 0o400)
    record = next(r for r in tmpfs_env.log_records() if r["event"] == "credential.issued")
    assert openbao.accessor_exists(record["reference"]["accessor"])

    revoked = run_broker(tmpfs_env, "revoke", "--session", document["session"])
    assert revoked.code == 0, revoked.stderr
    assert not directory.exists()
    assert not openbao.accessor_exists(record["reference"]["accessor"])


def test_always_is_refused_naming_the_capability(tmpfs_env: BrokerEnv) -> None:
    tmpfs_env.settings["mount_tmpfs"] = "always"
    tmpfs_env.write_config()
    result = run_broker(tmpfs_env, "issue", "--task", str(tmpfs_env.write_task(VAULT_TASK)))
    assert result.code == 2
    assert "CAP_SYS_ADMIN" in result.stderr
