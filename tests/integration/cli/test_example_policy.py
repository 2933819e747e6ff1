"""``scripts/demo`` decides with ``policies/example.yaml``: the config it writes names every provider instance the
example's grants name (a grant naming an instance the config lacks makes the whole policy fail to load)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from devstack.config import provider_tables
from devstack.demo import TASK, example_config

ROOT = Path(__file__).resolve().parents[3]


def private(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def test_the_demos_config_loads_the_example_policy_and_allows_the_demo_task(tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    providers = provider_tables(
        vault_addr="http://127.0.0.1:9",
        vault_token_file=private(tmp_path / "vault-token", b"root"),
        aws_url="http://127.0.0.1:9",
        github_url="http://127.0.0.1:9",
        github_key_file=private(tmp_path / "github-app.pem", key),
    )
    policies = tmp_path / "policies"
    policies.mkdir()
    text = (ROOT / "policies" / "example.yaml").read_text()
    if os.geteuid() != 0:  # as the demo does
        text = text.replace('"uid:1000"', f'"uid:{os.getuid()}"')
    (policies / "example.yaml").write_text(text)
    settings = {
        "state_dir": str(tmp_path / "state"),
        "runtime_dir": str(tmp_path / "run"),
        "policy_dir": str(policies),
        "audit_key": str(tmp_path / "audit.key"),
        "mount_tmpfs": "never",
    }
    config = tmp_path / "broker.toml"
    config.write_text(example_config(settings, providers))
    task = tmp_path / "task.yaml"
    task.write_text(TASK)
    argv = [sys.executable, "-m", "broker", "--config", str(config), "policy", "check", "--task", str(task)]
    checked = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "allow" in checked.stdout.lower()
