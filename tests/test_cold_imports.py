"""What a cold process loads before its first provider call: only what its command needs.

Not timings (the bench measures those): the modules, so a change that drags the
policy, YAML or the config parser back into a path that does not use them fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PARSE_ONLY = ("broker.core.inputs.policy", "broker.core.inputs.manifest", "yaml")


def loaded_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    program = f"import sys\n{code}\nprint('\\n'.join(sorted(sys.modules)))"
    completed = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    return set(completed.stdout.split())


def test_the_direct_revoke_path_loads_no_policy_manifest_or_yaml() -> None:
    modules = loaded_after(
        "import broker.cli.app, broker.cli.sessions, broker.core.revoking, broker.core.sweeping, broker.core.status"
    )
    assert "broker.core.revoking" in modules  # the measurement sees the path's own imports
    assert sorted(m for m in modules if m.split(".")[0] == "yaml" or m in PARSE_ONLY) == []


def test_the_thin_clients_issue_reads_the_task_file_without_the_config_or_provider_vocabulary(tmp_path: Path) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("version: 1\ntask: fix-1\ncredentials: []\n")
    env = {"PATH": os.environ["PATH"], "BROKER_SOCKET": str(tmp_path / "absent.sock")}
    code = (
        "from broker.entry import run\n"
        f"sys.argv = ['broker', 'issue', '--task', {str(task)!r}, '--json']\n"
        "try:\n    run()\nexcept SystemExit as exit:\n    assert exit.code != 0\n"
    )
    modules = loaded_after(code, env)
    assert "broker.core.inputs.strictdata" in modules  # it did read and parse the task file
    heavy = (
        "broker.core.inputs.config",
        "broker.core.inputs.manifest",
        "broker.core.inputs.policy",
        "providers.base",
        "broker.egress.policy",
    )
    assert sorted(m for m in modules if m in heavy) == []
