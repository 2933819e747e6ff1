"""``broker init``, without a server: a fresh installation with every file and directory in its mode, the
embedded default policy, ``--force``, and audit keys that are kept, never regenerated.
"""

from __future__ import annotations

import os
from pathlib import Path

from broker.audit.keys import load_fingerprint_keys, load_or_create_keys, load_signing_keys
from broker.core.inputs.config import load_config
from broker.core.setup.install import DEFAULT_POLICY
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.install import init_args, mode, new_env

REPOSITORY = Path(__file__).resolve().parents[4]


def test_init_creates_every_file_and_directory_with_its_mode(tmp_path: Path) -> None:
    env = new_env(tmp_path)
    old_umask = os.umask(0o077)  # the modes must not depend on the umask
    try:
        result = env.run("init", *init_args(tmp_path))
    finally:
        os.umask(old_umask)
    assert result.code == 0, result.stderr
    etc = tmp_path / "etc"
    expected = {
        etc: 0o755,
        etc / "broker.toml": 0o644,
        etc / "policies": 0o755,
        etc / "policies" / "default.yaml.example": 0o644,
        etc / "audit.key": 0o400,
        etc / "fingerprint.key": 0o400,
        tmp_path / "state": 0o700,
        tmp_path / "run": 0o711,
    }
    assert {path: mode(path) for path in expected} == expected
    created = [line.split(" ")[1] for line in result.stdout.splitlines() if line.startswith("created ")]
    assert created == [str(path) for path in expected]
    assert "next steps:" in result.stdout and f"broker --config {etc / 'broker.toml'} doctor" in result.stdout

    config = load_config(etc / "broker.toml")
    assert config.providers == {}
    assert (config.state_dir, config.runtime_dir) == (tmp_path / "state", tmp_path / "run")
    assert (config.policy_dir, config.audit_key) == (etc / "policies", etc / "audit.key")
    assert config.fingerprint_key == etc / "fingerprint.key"
    assert (config.default_ttl, config.max_ttl, config.mount_tmpfs) == (1800, 12 * 3600, "auto")
    for provider_type in ("vault", "aws_sts", "github_app"):  # commented-out examples of every type
        assert f'# type = "{provider_type}"' in (etc / "broker.toml").read_text()
    assert (etc / "policies" / "default.yaml.example").read_text() == DEFAULT_POLICY
    assert not list((etc / "policies").glob("*.yaml"))  # nothing loaded until the operator says so
    assert load_signing_keys(etc / "audit.key").key_id in result.stdout
    assert load_fingerprint_keys(etc / "fingerprint.key").key_id in result.stdout


def test_the_embedded_default_policy_is_the_repository_file() -> None:
    assert (REPOSITORY / "policies" / "default.yaml").read_text(encoding="utf-8") == DEFAULT_POLICY


def test_a_second_init_refuses_without_force_naming_the_file(installed: BrokerEnv, tmp_path: Path) -> None:
    installed.config_path.write_text(installed.config_path.read_text() + "# edited by the operator\n")
    result = installed.run("init", *init_args(tmp_path))
    assert result.code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"broker: error: {installed.config_path} already exists; use --force")
    assert installed.config_path.read_text().endswith("# edited by the operator\n")


def test_force_overwrites_config_and_policy_but_keeps_the_audit_key(installed: BrokerEnv, tmp_path: Path) -> None:
    key_path = installed.root / "audit.key"
    key_bytes, key_id = key_path.read_bytes(), load_signing_keys(key_path).key_id
    installed.config_path.write_text("broken = [")
    (installed.policy_dir / "default.yaml.example").write_text("edited")
    result = installed.run("init", *init_args(tmp_path), "--force")
    assert result.code == 0, result.stderr
    assert f"overwritten {installed.config_path} " in result.stdout
    assert f"kept {key_path} (checkpoint signing key, key id {key_id}; never regenerated)" in result.stdout
    assert key_path.read_bytes() == key_bytes and mode(key_path) == 0o400
    assert load_config(installed.config_path).providers == {}
    assert (installed.policy_dir / "default.yaml.example").read_text() == DEFAULT_POLICY


def test_init_keeps_an_audit_key_the_broker_already_created(tmp_path: Path) -> None:
    env = new_env(tmp_path)
    env.root.mkdir(mode=0o700)
    keys = load_or_create_keys(env.root / "audit.key", env.root / "fingerprint.key")  # as a first run does
    result = env.run("init", *init_args(tmp_path))
    assert result.code == 0, result.stderr
    assert f"kept {env.root / 'audit.key'} (checkpoint signing key, key id {keys.key_id}" in result.stdout
    assert f"kept {env.root / 'fingerprint.key'} (fingerprint key, key id {keys.fingerprints.key_id}" in result.stdout
    assert f"kept {env.root} (config directory, mode 0700)" in result.stdout  # an existing directory is left alone
