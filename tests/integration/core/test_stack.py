"""All three providers in one session through the real CLI: issue, use the files, revoke, audit."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from devstack.github_app import GitHubAppEmulator
from providers.aws.deny_policy.layout import SOURCE_IDENTITY
from tests.fixtures.aws import AwsRole, iam_client
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.openbao import OpenBao
from tests.fixtures.stack import STACK_TASK

pytestmark = pytest.mark.server


def issue(env: BrokerEnv, task: str = STACK_TASK) -> dict[str, Any]:
    result = env.run("issue", "--task", str(env.write_task(task)), "--json")
    assert result.code == 0, result.stderr
    document: dict[str, Any] = result.json()
    return document


def issued_records(env: BrokerEnv) -> dict[str, dict[str, Any]]:
    return {r["credential"]: r for r in env.log_records() if r["event"] == "credential.issued"}


def test_one_session_with_every_provider(
    stack_env: BrokerEnv, openbao: OpenBao, aws_role: AwsRole, github_emulator: GitHubAppEmulator
) -> None:
    document = issue(stack_env)
    directory = Path(document["dir"])
    assert sorted(os.listdir(directory)) == ["artifacts", "kv", "repo", "session.json"]
    files = {c["name"]: c["files"] for c in document["credentials"]}
    assert files == {
        "repo": ["repo/token", "repo/gitconfig"],
        "artifacts": ["artifacts/credentials", "artifacts/config"],
        "kv": ["kv/token"],
    }
    assert document["env"] == {
        "GIT_CONFIG_GLOBAL": "/run/secrets/repo/gitconfig",
        "AWS_SHARED_CREDENTIALS_FILE": "/run/secrets/artifacts/credentials",
        "AWS_CONFIG_FILE": "/run/secrets/artifacts/config",
        "AWS_REGION": "us-east-1",
        "VAULT_ADDR": openbao.addr,
        "BROKER_SESSION": document["session"],
    }
    expiry = document["expires_at"]
    assert all(c["expires_at"] <= expiry for c in document["credentials"])

    # GitHub: the token is live at the emulator with exactly the asked scope.
    token = (directory / "repo" / "token").read_text()
    assert github_emulator.token_state(token) == "valid"
    minted = github_emulator.calls_to("create_token")[-1].body
    assert minted == {"repositories": ["widgets"], "permissions": {"contents": "write", "pull_requests": "write"}}

    # AWS: the files work unchanged with a fresh SDK session.
    parser = configparser.ConfigParser()
    parser.read_string((directory / "artifacts" / "credentials").read_text())
    session = boto3.Session(
        aws_access_key_id=parser["default"]["aws_access_key_id"],
        aws_secret_access_key=parser["default"]["aws_secret_access_key"],
        aws_session_token=parser["default"]["aws_session_token"],
        region_name="us-east-1",
    )
    identity = session.client("sts", endpoint_url=aws_role.endpoint_url).get_caller_identity()
    assert identity["Arn"].endswith(f"assumed-role/agent-ci/{document['session']}.artifacts")

    # Vault: as in the Vault tests.
    records = issued_records(stack_env)
    assert openbao.accessor_exists(records["kv"]["reference"]["accessor"])
    assert records["artifacts"]["reference"]["access_key_id"] == parser["default"]["aws_access_key_id"]
    assert records["repo"]["reference"]["installation_id"]

    result = stack_env.run("revoke", "--session", document["session"], "--json")
    assert result.code == 0, result.stderr
    outcomes = {c["name"]: c["outcome"] for c in result.json()["credentials"]}
    assert outcomes == {"repo": "revoked", "artifacts": "revoked", "kv": "revoked"}
    assert github_emulator.token_state(token) == "revoked"
    assert not openbao.accessor_exists(records["kv"]["reference"]["accessor"])
    deny = iam_client(aws_role.endpoint_url).get_role_policy(RoleName="agent-ci", PolicyName="BrokerRevokedSessions")
    assert records["artifacts"]["reference"]["source_identity"] == document["session"]
    assert document["session"] in deny["PolicyDocument"]["Statement"][0]["Condition"]["StringEquals"][SOURCE_IDENTITY]
    assert not directory.exists()
    assert stack_env.run("audit", "verify").code == 0


def test_the_github_gitconfig_serves_the_token_to_git(stack_env: BrokerEnv, tmp_path: Path) -> None:
    document = issue(stack_env)
    directory = Path(document["dir"])
    token = (directory / "repo" / "token").read_text()
    gitconfig = (directory / "repo" / "gitconfig").read_text().replace("/run/secrets", str(directory))
    config_copy = tmp_path / "gitconfig"
    config_copy.write_text(gitconfig)
    host = stack_env.providers["github"]["api_url"]
    result = subprocess.run(
        ["git", "credential", "fill"],
        input=f"protocol=http\nhost={str(host).split('://')[1].split('/')[0]}\n\n",
        capture_output=True,
        text=True,
        env={
            "GIT_CONFIG_GLOBAL": str(config_copy),
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(tmp_path),
            "PATH": os.environ["PATH"],
        },
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"password={token}" in result.stdout.splitlines()


def test_an_aws_request_outside_the_grant_is_denied_naming_the_action(stack_env: BrokerEnv) -> None:
    task = STACK_TASK.replace('Action: ["s3:GetObject"]', 'Action: ["s3:GetObject", "s3:PutObject"]')
    result = stack_env.run("issue", "--task", str(stack_env.write_task(task)))
    assert result.code == 3
    assert "s3:PutObject" in result.stderr
    assert stack_env.session_dirs() == []


def test_a_github_repository_outside_the_grant_is_denied(stack_env: BrokerEnv) -> None:
    task = STACK_TASK.replace("repositories: [octo-org/widgets]", "repositories: [octo-org/secret-infra]")
    result = stack_env.run("issue", "--task", str(stack_env.write_task(task)))
    assert result.code == 3 and "octo-org/secret-infra" in result.stderr


def test_a_failing_provider_rolls_back_the_others(
    stack_env: BrokerEnv, openbao: OpenBao, github_emulator: GitHubAppEmulator
) -> None:
    """The GitHub mint fails (an installation that cannot give the permission): Vault and AWS are revoked."""
    task = STACK_TASK.replace(
        "{contents: write, pull_requests: write}", "{contents: write, pull_requests: write, metadata: read}"
    )
    github_emulator.force("create_token", 500, 500, 500, 500, 500)
    result = stack_env.run("issue", "--task", str(stack_env.write_task(task)))
    assert result.code == 4, result.stderr
    records = issued_records(stack_env)
    assert "repo" not in records
    revoked = {r["credential"]: r["outcome"] for r in stack_env.log_records() if r["event"] == "credential.revoked"}
    assert revoked == {name: "revoked" for name in records}
    if "kv" in records:
        assert not openbao.accessor_exists(records["kv"]["reference"]["accessor"])
    assert stack_env.session_dirs() == []


def test_no_secret_of_any_provider_leaks_into_outputs_or_state(stack_env: BrokerEnv) -> None:
    document = issue(stack_env)
    directory = Path(document["dir"])
    parser = configparser.ConfigParser()
    parser.read_string((directory / "artifacts" / "credentials").read_text())
    secrets = [
        (directory / "repo" / "token").read_text(),
        (directory / "kv" / "token").read_text(),
        parser["default"]["aws_secret_access_key"],
        parser["default"]["aws_session_token"],
    ]
    outputs = [
        stack_env.run("status", "--all", "--json"),
        stack_env.run("audit", "list", "--json"),
        stack_env.run("revoke", "--session", document["session"], "--json"),
        stack_env.run("sweep", "--json"),
    ]
    for secret in secrets:
        for result in outputs:
            assert secret not in result.stdout + result.stderr
        for path in stack_env.state_dir.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path


def test_concurrent_revocations_on_one_role_keep_every_deny_entry(stack_env: BrokerEnv, aws_role: AwsRole) -> None:
    """Brokers on one host serialise deny-policy writes per role with a file lock: no entry is lost."""
    sessions = [issue(stack_env)["session"] for _ in range(4)]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "broker.cli", "--config", str(stack_env.config_path), "revoke", "--session", s],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in sessions
    ]
    for process in processes:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
    deny = json.dumps(
        iam_client(aws_role.endpoint_url).get_role_policy(RoleName="agent-ci", PolicyName="BrokerRevokedSessions")[
            "PolicyDocument"
        ]
    )
    ids = [
        r["reference"]["source_identity"]
        for r in stack_env.log_records()
        if r.get("credential") == "artifacts" and r["event"] == "credential.issued"
    ]
    assert sorted(ids) == sorted(sessions) and all(f'"{i}"' in deny for i in ids)
