"""The bench's broker installations against the local stack (``devstack``), and the stack's AWS figures."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.common import (
    ACCOUNT,
    APP_ID,
    BROKER,
    BROKER_ROLE,
    FLOOR_ROLE,
    MOTO_IDENTITY,
    REGION,
    WORK,
    Ran,
    process_cpu,
    run,
)
from broker.host import mounts
from broker.vocab.durations import parse_duration
from devstack.config import STACK_POLICY, STACK_TASK, config_text, provider_tables
from devstack.openbao import ROOT_TOKEN, TOKEN_ROLE
from devstack.stack import Stack as DevStack


class Stack(DevStack):
    """The local stack with the broker's role and the floor's, and what the figures read from AWS."""

    def __init__(self) -> None:
        super().__init__(WORK, roles=(BROKER_ROLE, FLOOR_ROLE), identity=MOTO_IDENTITY)

    def reset_deny(self) -> None:
        """Drop both roles' deny policies, so repeated revocations never fill IAM's 10,240-char budget."""
        iam = self.iam()
        for role in (BROKER_ROLE, FLOOR_ROLE):
            with contextlib.suppress(iam.exceptions.NoSuchEntityException):
                iam.delete_role_policy(RoleName=role, PolicyName="BrokerRevokedSessions")

    def server_cpu(self) -> dict[str, float]:
        """CPU seconds each server process has used so far."""
        return {name: process_cpu(pid) for name, pid in self.pids().items()}

    def denied_userids(self, role: str = BROKER_ROLE) -> int:
        """How many sessions the role's deny policy names (one per revoked AWS session).

        The broker denies a session by its source identity (the broker session id) when it has one, else by
        its aws:userid; both are counted.
        """
        iam = self.iam()
        try:
            document = iam.get_role_policy(RoleName=role, PolicyName="BrokerRevokedSessions")["PolicyDocument"]
        except iam.exceptions.NoSuchEntityException:
            return 0
        values: set[str] = set()
        for statement in document.get("Statement", []):
            equals = statement.get("Condition", {}).get("StringEquals", {})
            for key in ("aws:userid", "aws:SourceIdentity"):
                found = equals.get(key, [])
                values.update([found] if isinstance(found, str) else found)
        return len(values)

    def deny_policy_size(self, role: str = BROKER_ROLE) -> int:
        iam = self.iam()
        try:
            document = iam.get_role_policy(RoleName=role, PolicyName="BrokerRevokedSessions")["PolicyDocument"]
        except iam.exceptions.NoSuchEntityException:
            return 0
        return len(json.dumps(document, separators=(",", ":")))


def base_env() -> dict[str, str]:
    """A clean environment: the broker's own AWS identity as moto's dummy keys, nothing from ~/.aws."""
    home = WORK / "home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "AWS_ACCESS_KEY_ID": MOTO_IDENTITY["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": MOTO_IDENTITY["aws_secret_access_key"],
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(WORK / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(WORK / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@dataclass(frozen=True)
class Urls:
    """Where the providers answer: the servers themselves, or latency proxies in front of them."""

    vault: str
    aws: str
    github: str


def stack_urls(stack: Stack) -> Urls:
    assert stack.bao is not None
    return Urls(stack.bao.addr, stack.aws_url, stack.github_url)


@dataclass
class BrokerSetup:
    """One broker installation under ``bench-results/work/<name>``: config, policy, task, secrets."""

    name: str
    stack: Stack

    @property
    def dir(self) -> Path:
        return WORK / self.name

    @property
    def config(self) -> Path:
        return self.dir / "broker.toml"

    @property
    def task(self) -> Path:
        return self.dir / "task.yaml"

    def create(
        self, task: str = STACK_TASK, urls: Urls | None = None, extra: dict[str, str] | None = None
    ) -> BrokerSetup:
        """Write the installation; ``urls`` points it at proxies, ``extra`` adds top-level settings (a fleet's)."""
        unmount_under(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(mode=0o700, parents=True)
        (self.dir / "policies").mkdir()
        (self.dir / "policies" / "agents.yaml").write_text(textwrap.dedent(STACK_POLICY))
        self.task.write_text(textwrap.dedent(task))
        for name, data in (("vault-token", ROOT_TOKEN.encode()), ("github-app.pem", self.stack.private_pem)):
            path = self.dir / name
            path.write_bytes(data)
            path.chmod(0o600)
        urls = urls or stack_urls(self.stack)
        settings = {
            "state_dir": str(self.dir / "state"),
            "runtime_dir": str(self.dir / "run"),
            "policy_dir": str(self.dir / "policies"),
            "audit_key": str(self.dir / "audit.key"),
            **(extra or {}),
        }
        providers = provider_tables(
            vault_addr=urls.vault,
            vault_token_file=self.dir / "vault-token",
            aws_url=urls.aws,
            github_url=urls.github,
            github_key_file=self.dir / "github-app.pem",
        )
        self.config.write_text(config_text(settings, providers))
        return self

    def cmd(self, *args: str) -> list[str]:
        return [BROKER, "--config", str(self.config), *args]

    def issue(self, env: dict[str, str]) -> tuple[Ran, str]:
        ran = run(self.cmd("issue", "--task", str(self.task), "--json"), env=env)
        session = ""
        if ran.code == 0:
            with contextlib.suppress(ValueError, KeyError):
                session = json.loads(ran.stdout)["session"]
        return ran, session

    def revoke(self, session: str, env: dict[str, str]) -> tuple[Ran, str]:
        """The run and "" when every credential came back revoked and the directory went, else what did not."""
        ran = run(self.cmd("revoke", "--session", session, "--json"), env=env)
        problem = ""
        try:
            report = json.loads(ran.stdout)
            bad = [f"{c['name']}={c['outcome']}" for c in report["credentials"] if c["outcome"] != "revoked"]
            if bad or not report["dir_removed"]:
                problem = f"outcomes {bad}, dir_removed {report['dir_removed']}"
        except (ValueError, KeyError, TypeError):
            problem = ran.first_error()
        if ran.code != 0 and not problem:
            problem = ran.first_error()
        return ran, problem


def unmount_under(path: Path) -> None:
    prefix = str(path) + "/"
    for point in sorted(mounts.mount_points(), reverse=True):
        if point.startswith(prefix):
            with contextlib.suppress(OSError):
                mounts.unmount(Path(point))


def floor_params(
    stack: Stack, floor_dir: Path, setup: BrokerSetup, urls: Urls | None = None, name: str = "floor-params.json"
) -> Path:
    """The floor's inputs: the stack task's credentials as the broker would mint them (at ``urls``)."""
    urls = urls or stack_urls(stack)
    task = yaml.safe_load(STACK_TASK)
    by_type = {c["provider"]: c for c in task["credentials"]}
    github, aws, vault = by_type["github"], by_type["aws"], by_type["vault"]
    params = {
        "task": task["task"],
        "uid": task["sandbox"]["uid"],
        "gid": task["sandbox"]["gid"],
        "mount_path": task["sandbox"]["mount_path"],
        "floor_dir": str(floor_dir),
        "vault_addr": urls.vault,
        "vault_token_file": str(setup.dir / "vault-token"),
        "vault_token_role": TOKEN_ROLE,
        "vault_policies": vault["policies"],
        "vault_ttl": parse_duration(vault["ttl"], "ttl"),
        "vault_num_uses": vault["num_uses"],
        "aws_endpoint": urls.aws,
        "aws_region": REGION,
        "aws_role_arn": f"arn:aws:iam::{ACCOUNT}:role/{FLOOR_ROLE}",
        "aws_ttl": parse_duration(aws["ttl"], "ttl"),
        "aws_session_policy": aws["session_policy"],
        "github_api": urls.github,
        "github_app_id": str(APP_ID),
        "github_key_file": str(setup.dir / "github-app.pem"),
        "github_repositories": github["repositories"],
        "github_permissions": github["permissions"],
    }
    path = WORK / name
    path.write_text(json.dumps(params, indent=1))
    return path
