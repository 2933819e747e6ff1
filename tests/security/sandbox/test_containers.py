"""A container holds placeholders and hints only: a secret the proxy puts in never enters it, nor the engine's argv.

The session has a ``kind: secret`` key of ``inject: proxy`` (a canary in OpenBao's KV) and runs in a real podman
container with ``--network allowlist``. Inside, everything the command could read is printed: its environment,
every process's argv, every file under /run (the session directory), /etc, /tmp and /workspace. Outside, while it
runs, every process's argv on the host is read (what ``ps`` shows): the engine's command line holds neither the
key nor the placeholder nor any other value of the command's environment (they go through an env file). The
broker's own environment does not reach the container either.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.containers import PODMAN_OPTIONS, podman_image, podman_unavailable
from tests.fixtures.openbao import OpenBao

__all__ = ["podman_image"]  # fixture
pytestmark = [pytest.mark.server, pytest.mark.skipif(bool(podman_unavailable()), reason=str(podman_unavailable()))]
SERVICE = "127.0.0.1:9"  # never reached: the test only looks at what the container holds
POLICY = f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["{SERVICE}"]
    grants:
      - provider: vault
        secret_paths: ["llm/*"]
        secret_hosts: ["{SERVICE}"]
"""
TASK = f"""
version: 1
task: fix-canary-1
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
network: {{allow: ["{SERVICE}"]}}
credentials:
  - name: llm
    provider: vault
    kind: secret
    path: llm/canary
    field: key
    inject: proxy
    hosts: ["{SERVICE}"]
    header: "Authorization: Bearer {{}}"
    env: LLM_API_KEY
"""
INSIDE = r"""
echo "placeholder=$LLM_API_KEY"
sleep 3
tr '\0' '\n' < /proc/self/environ
for p in /proc/[0-9]*; do tr '\0' ' ' < "$p/cmdline" 2>/dev/null; echo; done
grep -r -a -h -e '' /run /etc /tmp /workspace 2>/dev/null
echo done
"""


def host_argvs() -> list[str]:
    argvs = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argvs.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return argvs


def test_the_key_never_enters_the_container_nor_the_engines_argv(
    vault_env: BrokerEnv, openbao: OpenBao, podman_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-canary-" + secrets.token_urlsafe(24)
    openbao.client().secrets.kv.v2.create_or_update_secret(path="llm/canary", secret={"key": key})
    monkeypatch.setenv("BROKER_OWN_CANARY", "own-" + secrets.token_hex(8))
    vault_env.tables["sandbox.podman"] = dict(PODMAN_OPTIONS)
    vault_env.write_config()
    vault_env.write_policy(POLICY)
    task = vault_env.write_task(TASK)
    argv = [sys.executable, "-m", "broker.cli", "--config", str(vault_env.config_path), "exec", "--task", str(task)]
    argv += ["--sandbox", "podman", "--image", podman_image, "--", "sh", "-c", INSIDE]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8", errors="replace")
    assert process.stdout is not None
    first = process.stdout.readline()
    assert first.startswith("placeholder=sk-"), first
    placeholder = first.strip().split("=", 1)[1]
    assert placeholder != key
    seen_by_ps = host_argvs()  # while the container runs
    rest, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    inside = first + rest
    assert rest.rstrip().endswith("done")
    assert "/run/secrets/llm" in inside or "LLM_API_KEY" in inside
    assert key not in inside
    assert not any(key in line for line in seen_by_ps)
    assert not any(placeholder in line for line in seen_by_ps)  # the environment is an env file, not argv
    assert not any("BROKER_SESSION=" in line for line in seen_by_ps)
    assert "own-" not in inside and "BROKER_OWN_CANARY" not in inside
    assert key not in stderr
