"""The demo behind ``scripts/demo`` (``python -m devstack.demo``): the broker's main job against the local stack.

Starts a real OpenBao dev server, a moto server and the GitHub App emulator on
loopback, writes a config, uses ``policies/example.yaml`` as the policy, then
runs the real ``broker`` command: policy check, issue, (use the files), revoke,
audit verify and list. Secrets are never printed: files are shown by name and
size only. Everything lives in ``.demo/`` and the servers stop at the end.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import boto3
import hvac

from broker.host import mounts
from devstack.config import STACK_TASK, config_text, provider_tables
from devstack.github_app import GitHubAppEmulator
from devstack.openbao import ROOT_TOKEN, OpenBao
from devstack.stack import ROOT, in_process

DEMO = ROOT / ".demo"
SANDBOX_UID = 1000 if os.geteuid() == 0 else os.getuid()
SANDBOX_GID = 1000 if os.geteuid() == 0 else os.getgid()

TASK = STACK_TASK.replace("uid: 1000, gid: 1000", f"uid: {SANDBOX_UID}, gid: {SANDBOX_GID}").lstrip()


def step(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m" if sys.stdout.isatty() else f"\n== {title}", flush=True)


def broker(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    command = [str(ROOT / ".venv" / "bin" / "broker"), "--config", str(DEMO / "broker.toml"), *args]
    print("$ broker " + " ".join(args), flush=True)
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if check and result.returncode != 0:
        raise SystemExit(f"demo: broker {args[0]} exited {result.returncode}")
    return result


def clean_previous_run() -> None:
    for point in sorted(mounts.mount_points(), reverse=True):
        if point.startswith(str(DEMO) + "/"):
            mounts.unmount(Path(point))
    shutil.rmtree(DEMO, ignore_errors=True)
    DEMO.mkdir(mode=0o700)


def runtime_dir() -> Path:
    if os.geteuid() == 0:
        return DEMO / "run"  # the broker mounts a tmpfs per session
    return Path("/dev/shm") / f"broker-demo-{os.getuid()}"  # already tmpfs


def write_secret(name: str, data: bytes) -> Path:
    path = DEMO / name
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def main() -> int:
    clean_previous_run()
    step("starting the local stack: OpenBao dev server, moto server, GitHub App emulator")
    try:
        with in_process(MOTO_IDENTITY) as stack:
            try:
                return run_demo(stack.bao, stack.aws_url, stack.github, stack.keys.private_pem)
            finally:
                step("stopping the stack")
    finally:
        for point in sorted(mounts.mount_points(), reverse=True):
            if point.startswith(str(DEMO) + "/"):
                mounts.unmount(Path(point))
        print("done: .demo/ keeps the config, the policy, the log and its audit key; the credentials are gone")


MOTO_IDENTITY = {"aws_access_key_id": "demo", "aws_secret_access_key": "demo"}  # moto accepts any key


def example_config(settings: dict[str, str], providers: dict[str, dict[str, str]]) -> str:
    """The demo's ``broker.toml``: the stack's providers, and what ``policies/example.yaml``'s other grants name (the
    broker's issuer and a model provider's token exchange, ``modelx``), which the demo asks nothing of, so neither
    is reached."""
    others = {
        "modelx": {
            "type": "token_exchange",
            "token_endpoint": "https://models.example/oauth/token",
            "audience": "https://models.example",
        }
    }
    return config_text(settings, providers | others) + '\n[identity]\nissuer = "http://127.0.0.1:8443"\n'


def run_demo(bao: OpenBao, aws_url: str, github: GitHubAppEmulator, private_pem: bytes) -> int:
    addr = bao.addr
    print(f"OpenBao {addr}   moto {aws_url}   GitHub emulator {github.api_url}")
    hvac.Client(url=addr, token=ROOT_TOKEN).secrets.kv.v2.create_or_update_secret(
        path="ci/build", secret={"answer": "42"}
    )
    # The broker's own AWS identity (moto accepts any key) lives in files of its own.
    aws_dir = DEMO / "broker-aws"
    aws_dir.mkdir(mode=0o700)
    (aws_dir / "credentials").write_text("[broker]\naws_access_key_id = demo\naws_secret_access_key = demo\n")
    (aws_dir / "config").write_text("[profile broker]\nregion = us-east-1\n")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "AWS_SHARED_CREDENTIALS_FILE": str(aws_dir / "credentials"),
        "AWS_CONFIG_FILE": str(aws_dir / "config"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    providers = provider_tables(
        vault_addr=addr,
        vault_token_file=write_secret("vault-token", ROOT_TOKEN.encode()),
        aws_url=aws_url,
        github_url=github.api_url,
        github_key_file=write_secret("github-app.pem", private_pem),
    )
    providers["aws"] |= {"profile": "broker", "revoke": "deny-policy"}
    policy_dir = DEMO / "policies"
    policy_dir.mkdir()
    shutil.copy(ROOT / "policies" / "example.yaml", policy_dir / "example.yaml")
    settings = {
        "state_dir": str(DEMO / "state"),
        "runtime_dir": str(runtime_dir()),
        "policy_dir": str(policy_dir),
        "audit_key": str(DEMO / "audit.key"),
        "default_ttl": "30m",
        "max_ttl": "12h",
    }
    if os.geteuid() != 0:
        settings["mount_tmpfs"] = "never"
    (DEMO / "broker.toml").write_text(example_config(settings, providers))
    (DEMO / "task.yaml").write_text(TASK)
    if os.geteuid() != 0:
        text = (policy_dir / "example.yaml").read_text()
        (policy_dir / "example.yaml").write_text(text.replace('"uid:1000"', f'"uid:{os.getuid()}"'))

    step("the task manifest (.demo/task.yaml)")
    print(TASK)
    step("policy decision, nothing minted yet")
    broker("policy", "check", "--task", str(DEMO / "task.yaml"), env=env)

    step("issue: decide, mint, write to tmpfs, log")
    document = json.loads(broker("issue", "--task", str(DEMO / "task.yaml"), "--json", env=env).stdout)
    directory = Path(document["dir"])
    step(f"the session directory {directory} (names, modes and sizes only)")
    for path in sorted(directory.rglob("*")):
        info = path.lstat()
        kind = "d" if path.is_dir() else "-"
        print(
            f"  {kind}{oct(info.st_mode & 0o777)[2:]} {info.st_uid}:{info.st_gid} {info.st_size:>6}  "
            f"{path.relative_to(directory)}"
        )
    fs = "its own tmpfs" if mounts.is_mount_point(directory) else "a tmpfs runtime_dir"
    print(f"  on {fs}; nothing of it is on disk")

    step("the credentials work (as the sandbox would use them)")
    token = (directory / "kv" / "token").read_text()
    secret = hvac.Client(url=addr, token=token).secrets.kv.v2.read_secret_version(
        path="ci/build", raise_on_deleted_version=True
    )
    print(f"  vault: read secret/ci/build with the kv token -> keys {sorted(secret['data']['data'])}")
    creds = configparser.ConfigParser()
    creds.read_string((directory / "artifacts" / "credentials").read_text())
    identity = boto3.client(
        "sts",
        endpoint_url=aws_url,
        region_name="us-east-1",
        aws_access_key_id=creds["default"]["aws_access_key_id"],
        aws_secret_access_key=creds["default"]["aws_secret_access_key"],
        aws_session_token=creds["default"]["aws_session_token"],
    ).get_caller_identity()
    print(f"  aws: get-caller-identity -> {identity['Arn']}")
    repo_token = (directory / "repo" / "token").read_text()
    print(f"  github: installation token is {github.token_state(repo_token)} at the emulator")

    step("revoke: every credential at its provider, directory wiped and unmounted")
    broker("revoke", "--session", document["session"], env=env)
    print(f"  github token now {github.token_state(repo_token)}; vault kv token: ", end="")
    try:
        hvac.Client(url=addr, token=token).secrets.kv.v2.read_secret_version(
            path="ci/build", raise_on_deleted_version=True
        )
        print("STILL VALID (bug)")
    except hvac.exceptions.Forbidden:
        print("refused (revoked)")
    print(f"  session directory exists: {directory.exists()}")

    step("the issuance log, as an auditor reads it")
    broker("audit", "list", env=env)
    (DEMO / "broker.pub").write_text(broker("audit", "public-key", env=env).stdout)
    broker(
        "audit",
        "verify",
        "--log",
        str(DEMO / "state" / "issuance.jsonl"),
        "--public-key",
        str(DEMO / "broker.pub"),
        env=env,
    )
    for name in ("vault-token", "github-app.pem"):
        (DEMO / name).unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
