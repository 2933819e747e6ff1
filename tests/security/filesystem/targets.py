"""What the filesystem attacks aim at: a broker whose Vault is a closed port (a run that got past the checks
would exit 4), a session directory on /dev/shm, the canary they try to carry out, and readers of what ended up
where.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.host.sessiondir import SessionDirectory, prepare_runtime_dir
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.net import closed_port

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (tmpfs mounts, chown to another user)")

CANARY = "canary-fs-attack-7f3a9c"
TASK = """
version: 1
task: fix-build-7
ttl: 20m
sandbox: {uid: 1000, gid: 1000, mount_path: /run/secrets}
credentials:
  - {name: kv, provider: vault, policies: [ci-read], ttl: 10m, num_uses: 5}
"""


def session(shm_dir: Path, session_id: str = "s-aaaaaaaaaaaa") -> SessionDirectory:
    runtime = prepare_runtime_dir(shm_dir, "never")
    directory = SessionDirectory(runtime, session_id, os.getuid(), os.getgid())
    directory.create()
    return directory


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def vault_env(tmp_path: Path, runtime_dir: Path | None = None) -> BrokerEnv:
    """A broker allowing TASK, whose vault is a closed port: a run that got past the checks would exit 4."""
    env = make_env(tmp_path, runtime_dir)
    token = env.write_secret("vault-token", CANARY)
    env.add_provider("vault", {"type": "vault", "addr": f"http://127.0.0.1:{closed_port()}", "token_file": str(token)})
    return env


def refused(env: BrokerEnv, fragment: str, code: int = 2) -> None:
    result = env.run("issue", "--task", str(env.write_task(TASK)))
    assert result.code == code, result.stderr
    assert result.stderr.startswith("broker: error: ") and result.stderr.count("\n") == 1
    assert fragment in result.stderr
    assert "credential.issued" not in env.events()


def snapshot(path: Path) -> dict[str, str]:
    """Every entry below ``path``: a symbolic link's target, a file's text, or "dir" (links not followed)."""
    entries = {}
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            entry = Path(top) / name
            relative = str(entry.relative_to(path))
            if entry.is_symlink():
                entries[relative] = "-> " + os.readlink(entry)
            else:
                entries[relative] = entry.read_text() if entry.is_file() else "dir"
    return entries
