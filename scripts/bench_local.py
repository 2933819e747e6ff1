"""The local stack for the benchmark: OpenBao, moto and the GitHub emulator, and a broker set up against them."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from bench_common import (  # noqa: E402
    ACCOUNT,
    APP_ID,
    BROKER,
    BROKER_ROLE,
    FLOOR_ROLE,
    MOTO_IDENTITY,
    OWNER,
    PYTHON,
    REGION,
    SERVERS,
    WORK,
    Ran,
    process_cpu,
    run,
)

from broker.host import mounts  # noqa: E402
from broker.vocab.durations import parse_duration  # noqa: E402
from tests.fixtures.github import rsa_key_pair  # noqa: E402
from tests.fixtures.net import free_port, wait_http  # noqa: E402
from tests.fixtures.openbao import ROOT_TOKEN, OpenBao, start_openbao, stop_openbao  # noqa: E402
from tests.fixtures.stack import STACK_POLICY, STACK_TASK  # noqa: E402

# -- the local stack -----------------------------------------------------------------------


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


class Stack:
    """OpenBao dev server, moto server and the GitHub App emulator, each its own process."""

    def __init__(self) -> None:
        self.bao: OpenBao | None = None
        self.children: list[subprocess.Popen[bytes]] = []
        self.aws_url = ""
        self.github_url = ""
        self.private_pem = b""
        self.role_ids: dict[str, str] = {}

    def start(self) -> None:
        self.bao = start_openbao()
        moto_port = free_port()
        self.children.append(
            subprocess.Popen([PYTHON, SERVERS, "moto", str(moto_port)], stdout=subprocess.DEVNULL, cwd=ROOT)
        )
        self.aws_url = f"http://127.0.0.1:{moto_port}"
        wait_http(f"{self.aws_url}/moto-api/")
        keys = rsa_key_pair()
        self.private_pem = keys.private_pem
        public = WORK / "github-app.pub.pem"
        public.write_bytes(keys.public_pem)
        github_port = free_port()
        installation = f"{OWNER}:widgets,docs-site:contents=write,pull_requests=write,metadata=read"
        self.children.append(
            subprocess.Popen(
                [
                    PYTHON,
                    "-m",
                    "tests.emulators.github_app",
                    "--port",
                    str(github_port),
                    "--app-id",
                    str(APP_ID),
                    "--public-key",
                    str(public),
                    "--installation",
                    installation,
                ],
                stdout=subprocess.DEVNULL,
                cwd=ROOT,
            )
        )
        self.github_url = f"http://127.0.0.1:{github_port}"
        wait_port(github_port)
        iam = self.iam()
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                    "Action": ["sts:AssumeRole", "sts:TagSession", "sts:SetSourceIdentity"],
                }
            ],
        }
        for name in (BROKER_ROLE, FLOOR_ROLE):
            role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust), MaxSessionDuration=3600)
            self.role_ids[name] = role["Role"]["RoleId"]

    def iam(self) -> Any:
        import boto3

        return boto3.client("iam", endpoint_url=self.aws_url, region_name=REGION, **MOTO_IDENTITY)

    def reset_deny(self) -> None:
        """Drop both roles' deny policies, so repeated revocations never fill IAM's 10,240-char budget."""
        iam = self.iam()
        for role in (BROKER_ROLE, FLOOR_ROLE):
            with contextlib.suppress(iam.exceptions.NoSuchEntityException):
                iam.delete_role_policy(RoleName=role, PolicyName="BrokerRevokedSessions")

    def server_cpu(self) -> dict[str, float]:
        """CPU seconds each server process has used so far."""
        pids = {"openbao": self.bao.process.pid if self.bao else 0}
        pids.update({name: child.pid for name, child in zip(("moto", "github"), self.children, strict=False)})
        return {name: process_cpu(pid) for name, pid in pids.items()}

    def denied_userids(self, role: str = BROKER_ROLE) -> int:
        """How many aws:userid values the role's deny policy holds (one per revoked AWS credential)."""
        iam = self.iam()
        try:
            document = iam.get_role_policy(RoleName=role, PolicyName="BrokerRevokedSessions")["PolicyDocument"]
        except iam.exceptions.NoSuchEntityException:
            return 0
        values: set[str] = set()
        for statement in document.get("Statement", []):
            found = statement.get("Condition", {}).get("StringEquals", {}).get("aws:userid", [])
            values.update([found] if isinstance(found, str) else found)
        return len(values)

    def deny_policy_size(self, role: str = BROKER_ROLE) -> int:
        iam = self.iam()
        try:
            document = iam.get_role_policy(RoleName=role, PolicyName="BrokerRevokedSessions")["PolicyDocument"]
        except iam.exceptions.NoSuchEntityException:
            return 0
        return len(json.dumps(document, separators=(",", ":")))

    def stop(self) -> None:
        for child in self.children:
            child.terminate()
        for child in self.children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        if self.bao is not None:
            stop_openbao(self.bao)


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

    def create(self, task: str = STACK_TASK) -> BrokerSetup:
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
        assert self.stack.bao is not None
        self.config.write_text(
            textwrap.dedent(f"""\
            state_dir = "{self.dir / "state"}"
            runtime_dir = "{self.dir / "run"}"
            policy_dir = "{self.dir / "policies"}"
            audit_key = "{self.dir / "audit.key"}"

            [providers.vault]
            type = "vault"
            addr = "{self.stack.bao.addr}"
            token_file = "{self.dir / "vault-token"}"
            token_role = "broker-session"

            [providers.aws]
            type = "aws_sts"
            region = "{REGION}"
            endpoint_url = "{self.stack.aws_url}"

            [providers.github]
            type = "github_app"
            app_id = "{APP_ID}"
            private_key_file = "{self.dir / "github-app.pem"}"
            api_url = "{self.stack.github_url}"
            """)
        )
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


def floor_params(stack: Stack, floor_dir: Path, setup: BrokerSetup) -> Path:
    """The floor's inputs: the stack task's credentials as the broker would mint them."""
    task = yaml.safe_load(STACK_TASK)
    by_type = {c["provider"]: c for c in task["credentials"]}
    github, aws, vault = by_type["github"], by_type["aws"], by_type["vault"]
    assert stack.bao is not None
    params = {
        "task": task["task"],
        "uid": task["sandbox"]["uid"],
        "gid": task["sandbox"]["gid"],
        "mount_path": task["sandbox"]["mount_path"],
        "floor_dir": str(floor_dir),
        "vault_addr": stack.bao.addr,
        "vault_token_file": str(setup.dir / "vault-token"),
        "vault_token_role": "broker-session",
        "vault_policies": vault["policies"],
        "vault_ttl": parse_duration(vault["ttl"], "ttl"),
        "vault_num_uses": vault["num_uses"],
        "aws_endpoint": stack.aws_url,
        "aws_region": REGION,
        "aws_role_arn": f"arn:aws:iam::{ACCOUNT}:role/{FLOOR_ROLE}",
        "aws_ttl": parse_duration(aws["ttl"], "ttl"),
        "aws_session_policy": aws["session_policy"],
        "github_api": stack.github_url,
        "github_app_id": str(APP_ID),
        "github_key_file": str(setup.dir / "github-app.pem"),
        "github_repositories": github["repositories"],
        "github_permissions": github["permissions"],
    }
    path = WORK / "floor-params.json"
    path.write_text(json.dumps(params, indent=1))
    return path
