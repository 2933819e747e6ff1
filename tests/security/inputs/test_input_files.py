"""Input files are not echoed: a manifest, policy or config that is really someone's credentials file.

The broker may read files its caller cannot, so ``--task`` (or ``--config``,
or a policy file) pointed at a credentials file or a script must not turn an
error message into a way to read it. Each file below holds a canary secret
on the very line the parser trips over; the error names the file and the
line, and the canary never reaches stdout or stderr. A manifest must be a
regular file: a FIFO, ``/dev/zero`` or a directory is refused at once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv, Result, make_env

CANARY = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYcanary"
INI_CREDENTIALS = f"[default]\naws_secret_access_key = {CANARY}\nregion = eu-west-1\n"
SHELL_SCRIPT = f"#!/bin/sh\nexport TOKEN={CANARY}\ncurl -H 'Authorization: Bearer {CANARY}' https://example.invalid\n"
YAML_BAD_LINE = f"version: 1\ntask: fix-1\nsecret: {CANARY}: x\n"
YAML_TAG_HANDLE = f"version: 1\ntoken: !{CANARY}! value\n"
JSON_BAD_LINE = f'{{"version": 1,\n "token": {CANARY}}}\n'
TOML_DUPLICATE_TABLE = f"[profile.{CANARY}]\nx = 1\n[profile.{CANARY}]\n"


def assert_not_echoed(result: Result, name: str, line: int) -> None:
    assert result.code == 2, result.stderr
    assert CANARY not in result.stdout + result.stderr
    assert CANARY[:6] not in result.stderr and "Bearer" not in result.stderr  # PyYAML quoted a prefix
    assert result.stderr.startswith("broker: error: ") and result.stderr.count("\n") == 1
    assert name in result.stderr, result.stderr
    assert f"line {line}" in result.stderr, result.stderr


@pytest.fixture
def env(tmp_path: Path) -> BrokerEnv:
    return make_env(tmp_path)


@pytest.mark.parametrize(
    ("content", "suffix", "line"),
    [
        (INI_CREDENTIALS, ".yaml", 2),
        (SHELL_SCRIPT, ".yaml", 3),
        (YAML_BAD_LINE, ".yaml", 3),
        (YAML_TAG_HANDLE, ".yaml", 2),
        (JSON_BAD_LINE, ".json", 2),
    ],
    ids=["ini-credentials", "shell-script", "yaml-syntax", "yaml-tag-handle", "json"],
)
@pytest.mark.parametrize("command", ["issue", "policy-check"])
def test_a_task_symlinked_to_a_secret_file_is_not_echoed(
    env: BrokerEnv, content: str, suffix: str, line: int, command: str
) -> None:
    secret = env.root / "credentials"
    secret.write_text(content)
    secret.chmod(0o600)
    link = env.root / f"task{suffix}"
    link.symlink_to(secret)
    args = ["issue"] if command == "issue" else ["policy", "check"]
    result = env.run(*args, "--task", str(link))
    assert_not_echoed(result, str(link), line)
    assert env.events() == []


@pytest.mark.parametrize(
    ("content", "line"),
    [(INI_CREDENTIALS, 2), (SHELL_SCRIPT, 3), (YAML_TAG_HANDLE, 2)],
    ids=["ini-credentials", "shell-script", "yaml-tag-handle"],
)
def test_a_policy_file_that_is_a_secret_file_is_not_echoed(env: BrokerEnv, content: str, line: int) -> None:
    secret = env.root / "credentials"
    secret.write_text(content)
    (env.policy_dir / "agents.yaml").unlink()
    (env.policy_dir / "zz-secret.yaml").symlink_to(secret)
    assert_not_echoed(env.run("policy", "lint"), "zz-secret.yaml", line)


@pytest.mark.parametrize(
    ("content", "line"),
    [(INI_CREDENTIALS, 2), (SHELL_SCRIPT, 2), (TOML_DUPLICATE_TABLE, 3)],
    ids=["ini-credentials", "shell-script", "toml-duplicate-table"],
)
def test_a_config_that_is_a_secret_file_is_not_echoed(env: BrokerEnv, content: str, line: int) -> None:
    secret = env.root / "credentials"
    secret.write_text(content)
    link = env.root / "other.toml"
    link.symlink_to(secret)
    result = env.run("--config", str(link), "policy", "lint")
    assert_not_echoed(result, str(link), line)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_task_that_is_not_a_regular_file_is_refused_without_reading(
    env: BrokerEnv, tmp_path: Path, kind: str
) -> None:
    if kind == "fifo":
        path = tmp_path / "task.yaml"
        os.mkfifo(path)  # nobody ever writes: a reader that blocks would hang here
    elif kind == "dev-zero":
        path = Path("/dev/zero")
    else:
        path = tmp_path / "task-dir.yaml"
        path.mkdir()
    # A separate process with a timeout, so a broker that blocks fails the test instead of hanging it.
    result = env.run_process("issue", "--task", str(path), timeout=60)
    assert result.code == 2, result.stderr
    expected = "is a directory" if kind == "directory" else "is not a regular file"
    assert result.stderr == f"broker: error: task file {path} {expected}\n"
    assert env.events() == []


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_config_that_is_not_a_regular_file_is_refused_without_reading(
    env: BrokerEnv, tmp_path: Path, kind: str
) -> None:
    path = Path("/dev/zero")
    if kind == "fifo":
        path = tmp_path / "broker.toml"
        os.mkfifo(path)
    result = env.run_process("--config", str(path), "policy", "lint", timeout=60)
    assert result.code == 2, result.stderr
    assert result.stderr == f"broker: error: config file {path} is not a regular file\n"
