"""The floor for ``scripts/bench``: what a minimal hand-written launcher needs to issue and revoke.

It makes the same provider calls as the broker for the stack task, one after
another, with the same libraries, and nothing else (no manifest, no policy,
no store, no log, no locks, no per-session mount):

    issue:  hvac token create through the token role (same parameters as providers/vault/client.py);
            boto3 iam get_role, sts assume_role (same parameters as providers/aws/provider.py),
            sts get_caller_identity with the new credentials;
            GitHub App JWT (pyjwt, RS256), installation lookup, POST access_tokens;
            the files written 0400 into a fresh directory on tmpfs, plus the references.
    revoke: vault revoke-accessor; aws iam get_role + get_role_policy + put_role_policy (a Deny on
            aws:userid / aws:SourceIdentity, no settle pause); github DELETE /installation/token;
            the directory removed.

Usage (run by path as a subprocess by the bench, so it pays interpreter start and its own imports, no more):

    python bench/floor.py issue  PARAMS.json      # prints the session directory
    python bench/floor.py revoke PARAMS.json DIR
    python bench/floor.py aws-issue  PARAMS.json  # the AWS calls alone (bench/commands/aws_round_trips.py);
    python bench/floor.py aws-revoke PARAMS.json DIR  # the other SDKs are imported by issue/revoke only
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.config import Config as BotoConfig

POLICY_NAME = "BrokerRevokedSessions"
GITHUB_HEADERS = {
    "Accept": "application/vnd.github+json",
    "X-GitHub-Api-Version": "2022-11-28",
    "User-Agent": "bench-floor/1",
}


def _boto_config() -> BotoConfig:
    return BotoConfig(connect_timeout=10, read_timeout=10, retries={"mode": "standard", "max_attempts": 3})


def _write(directory: str, relative: str, data: bytes, uid: int, gid: int) -> None:
    path = os.path.join(directory, relative)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o400)
    try:
        os.write(fd, data)
        os.fchown(fd, uid, gid)
    finally:
        os.close(fd)


def aws_issue(p: dict[str, Any], session: str, task: str, files: dict[str, bytes], refs: dict[str, object]) -> None:
    """get_role, assume_role, get_caller_identity with the new credentials; the files and references."""
    boto = boto3.session.Session(region_name=p["aws_region"])
    iam = boto.client("iam", endpoint_url=p["aws_endpoint"], config=_boto_config())
    sts = boto.client("sts", endpoint_url=p["aws_endpoint"], config=_boto_config())
    role_name = p["aws_role_arn"].rsplit("/", 1)[-1]
    role = iam.get_role(RoleName=role_name)["Role"]
    session_name = f"{session}.artifacts"
    assumed = sts.assume_role(
        RoleArn=p["aws_role_arn"],
        RoleSessionName=session_name,
        DurationSeconds=p["aws_ttl"],
        SourceIdentity=session,
        Tags=[
            {"Key": "broker:session", "Value": session},
            {"Key": "broker:task", "Value": task},
            {"Key": "broker:credential", "Value": "artifacts"},
        ],
        Policy=json.dumps(p["aws_session_policy"], separators=(",", ":")),
    )
    creds = assumed["Credentials"]
    check = boto3.session.Session(
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
        region_name=p["aws_region"],
    ).client("sts", endpoint_url=p["aws_endpoint"], config=_boto_config())
    identity = check.get_caller_identity()
    if identity["UserId"] != assumed["AssumedRoleUser"]["AssumedRoleId"]:
        raise SystemExit("floor: GetCallerIdentity names another identity")
    files["artifacts/credentials"] = (
        "[default]\n"
        f"aws_access_key_id = {creds['AccessKeyId']}\n"
        f"aws_secret_access_key = {creds['SecretAccessKey']}\n"
        f"aws_session_token = {creds['SessionToken']}\n"
    ).encode()
    files["artifacts/config"] = f"[default]\nregion = {p['aws_region']}\nendpoint_url = {p['aws_endpoint']}\n".encode()
    refs.update(
        role_name=role_name,
        role_id=role["RoleId"],
        assumed_role_id=assumed["AssumedRoleUser"]["AssumedRoleId"],
        expires_at=creds["Expiration"].astimezone(UTC).isoformat(),
    )


def issue(p: dict[str, Any]) -> str:
    import hvac
    import jwt
    import requests
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    session = "f-" + secrets.token_hex(6)
    task = p["task"]
    uid, gid = p["uid"], p["gid"]
    files: dict[str, bytes] = {}
    refs: dict[str, object] = {"session": session}

    # -- vault: token create through the token role, as providers/vault/client.py does it
    with open(p["vault_token_file"]) as handle:
        vault = hvac.Client(url=p["vault_addr"], token=handle.read().strip(), timeout=10)
    ttl = f"{p['vault_ttl']}s"
    auth = vault.auth.token.create(
        role_name=p["vault_token_role"],
        policies=list(p["vault_policies"]),
        meta={"broker_session": session, "broker_task": task, "broker_credential": "kv"},
        no_default_policy=True,
        renewable=False,
        ttl=ttl,
        explicit_max_ttl=ttl,
        display_name=f"broker-{task}-kv",
        num_uses=p["vault_num_uses"],
        type="service",
    )["auth"]
    files["kv/token"] = auth["client_token"].encode()
    refs["accessor"] = auth["accessor"]

    # -- aws: get_role, assume_role, get_caller_identity with the new credentials
    aws_issue(p, session, task, files, refs)

    # -- github: App JWT, installation lookup, POST access_tokens
    with open(p["github_key_file"], "rb") as handle:
        key: Any = load_pem_private_key(handle.read(), password=None)
    now = int(time.time())
    app_jwt = jwt.encode({"iat": now - 60, "exp": now + 540, "iss": p["github_app_id"]}, key, algorithm="RS256")
    http = requests.Session()
    http.headers.update(GITHUB_HEADERS)
    auth_header = {"Authorization": f"Bearer {app_jwt}"}
    owner, repo = p["github_repositories"][0].split("/")
    lookup = http.get(f"{p['github_api']}/repos/{owner}/{repo}/installation", headers=auth_header, timeout=10)
    lookup.raise_for_status()
    minted = http.post(
        f"{p['github_api']}/app/installations/{lookup.json()['id']}/access_tokens",
        headers={**auth_header, "Content-Type": "application/json"},
        data=json.dumps(
            {
                "repositories": [r.split("/")[1] for r in p["github_repositories"]],
                "permissions": p["github_permissions"],
            }
        ).encode(),
        timeout=10,
    )
    if minted.status_code != 201:
        raise SystemExit(f"floor: token create answered {minted.status_code}")
    files["repo/token"] = minted.json()["token"].encode()
    files["repo/gitconfig"] = (
        f'[credential "{p["github_api"]}"]\n\thelper = "!f() {{ echo username=x-access-token;'
        f' echo password=$(cat {p["mount_path"]}/repo/token); }}; f"\n'
    ).encode()

    # -- files: a fresh directory on tmpfs, 0400 files, 0500 directories
    directory = os.path.join(p["floor_dir"], session)
    os.mkdir(directory, 0o700)
    for relative, data in files.items():
        _write(directory, relative, data, uid, gid)
    _write(directory, ".refs.json", json.dumps(refs).encode(), 0, 0)
    for sub in ("kv", "artifacts", "repo"):
        os.chmod(os.path.join(directory, sub), 0o500)
        os.chown(os.path.join(directory, sub), uid, gid)
    os.chmod(directory, 0o500)
    return directory


def aws_revoke(p: dict[str, Any], refs: dict[str, Any]) -> None:
    """get_role (the role id), get_role_policy, put_role_policy with a Deny on the session."""
    iam = boto3.session.Session(region_name=p["aws_region"]).client(
        "iam", endpoint_url=p["aws_endpoint"], config=_boto_config()
    )
    role = iam.get_role(RoleName=refs["role_name"])["Role"]
    if role["RoleId"] != refs["role_id"]:
        raise SystemExit("floor: the role was recreated")
    try:
        document = iam.get_role_policy(RoleName=refs["role_name"], PolicyName=POLICY_NAME)["PolicyDocument"]
    except iam.exceptions.NoSuchEntityException:
        document = {"Version": "2012-10-17", "Statement": []}
    until = datetime.fromisoformat(refs["expires_at"]) + timedelta(hours=1)
    document["Statement"].append(
        {
            "Sid": "FloorRevoked" + until.strftime("%Y%m%dT%H%M") + secrets.token_hex(3),
            "Effect": "Deny",
            "Action": "*",
            "Resource": "*",
            "Condition": {"StringEquals": {"aws:userid": [refs["assumed_role_id"]]}},
        }
    )
    iam.put_role_policy(
        RoleName=refs["role_name"], PolicyName=POLICY_NAME, PolicyDocument=json.dumps(document, separators=(",", ":"))
    )


def revoke(p: dict[str, Any], directory: str) -> None:
    import hvac
    import requests

    with open(os.path.join(directory, ".refs.json")) as handle:
        refs = json.load(handle)
    with open(os.path.join(directory, "repo", "token")) as handle:
        github_token = handle.read()

    # -- vault: revoke by accessor
    with open(p["vault_token_file"]) as handle:
        vault = hvac.Client(url=p["vault_addr"], token=handle.read().strip(), timeout=10)
    vault.auth.token.revoke_accessor(refs["accessor"])

    # -- aws: the deny policy, read-modify-write, no settle pause
    aws_revoke(p, refs)

    # -- github: DELETE /installation/token with the token itself
    response = requests.delete(
        f"{p['github_api']}/installation/token",
        headers={**GITHUB_HEADERS, "Authorization": f"Bearer {github_token}"},
        timeout=10,
    )
    if response.status_code not in (204, 401):
        raise SystemExit(f"floor: token revoke answered {response.status_code}")

    # -- wipe the directory
    for root, dirs, _ in os.walk(directory):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o700)
    os.chmod(directory, 0o700)
    shutil.rmtree(directory)


def aws_only_issue(p: dict[str, Any]) -> str:
    """The AWS credential alone: its calls, its two files and the references in a fresh directory."""
    session = "f-" + secrets.token_hex(6)
    files: dict[str, bytes] = {}
    refs: dict[str, object] = {"session": session}
    aws_issue(p, session, p["task"], files, refs)
    directory = os.path.join(p["floor_dir"], session)
    os.mkdir(directory, 0o700)
    for relative, data in files.items():
        _write(directory, relative, data, p["uid"], p["gid"])
    _write(directory, ".refs.json", json.dumps(refs).encode(), 0, 0)
    return directory


def aws_only_revoke(p: dict[str, Any], directory: str) -> None:
    with open(os.path.join(directory, ".refs.json")) as handle:
        refs = json.load(handle)
    aws_revoke(p, refs)
    shutil.rmtree(directory)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("issue", "revoke", "aws-issue", "aws-revoke"):
        sys.stderr.write(__doc__.split("Usage")[1])
        return 2
    with open(argv[1]) as handle:
        params = json.load(handle)
    if argv[0] == "issue":
        print(issue(params))
    elif argv[0] == "aws-issue":
        print(aws_only_issue(params))
    elif argv[0] == "aws-revoke":
        aws_only_revoke(params, argv[2])
    else:
        revoke(params, argv[2])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
