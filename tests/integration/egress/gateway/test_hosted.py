"""The gateway as a hosted sandbox's own proxy: a process in a network namespace whose only route is to the gateway.

``broker serve`` runs the gateway on the host's end of a point-to-point link (TLS, a test CA given to the
sessions as ``[gateway] ca_file``); ``broker issue --gateway`` hands the launcher a session whose ``proxy/env``
and hints are all the process gets. The real clients (curl, git, requests, pip, boto3 against moto with IAM
authentication) reach the upstreams through it with the session's placeholders, the gateway puts the real
secrets in (Vault's ``kind: secret`` in a header, the AWS keys by re-signing), checks the session's operations,
and writes its evidence; nothing secret reaches the process.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.aws_iam import BUCKET
from tests.fixtures.gateway import GatewayStack, python, run, values
from tests.fixtures.netns import Namespace, unavailable

pytestmark = [pytest.mark.server, pytest.mark.root, pytest.mark.skipif(bool(unavailable()), reason=str(unavailable()))]


@pytest.fixture(scope="module")
def stack(hosted_gateway: GatewayStack) -> GatewayStack:
    return hosted_gateway


def sandboxed(namespace: Namespace, document: dict[str, Any]) -> Callable[..., list[str]]:
    """A command in the namespace, seeing the session's directory at its mount path as a sandbox would."""
    return lambda *command: namespace.argv(*command, session=document["dir"], at=document["mount_path"])


def test_curl_and_requests_reach_the_service_with_the_placeholder_alone(
    stack: GatewayStack, namespace: Namespace
) -> None:
    document = stack.issue(stack.task("fix-gw-http"))
    env, inside = stack.client_env(document), sandboxed(namespace, document)
    placeholder = env["OPENAI_API_KEY"]
    assert placeholder != stack.key and placeholder.startswith("sk-proj-")
    assert document["proxy_url"] == f"https://{document['session']}@{stack.host}:{stack.port}"
    api = f"https://{stack.api_host}"
    curl = run(
        inside(
            "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H", f"Authorization: Bearer {placeholder}",
            f"{api}/v1/models",
        ),
        env,
    )  # fmt: skip
    assert (curl.code, curl.stdout) == (0, "200"), curl.stderr
    program = (
        "import json, os, requests\n"
        f"r = requests.post('{api}/v1/chat', json={{}}, headers={{'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']}})\n"
        "e = requests.get('" + api + "/v1/echo', headers={'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']})\n"
        "print(json.dumps({'status': r.status_code, 'echo': e.text}))\n"
    )
    answered = values(run(inside(*python(program)), env))
    assert answered["status"] == 201
    assert stack.key not in answered["echo"] and placeholder in answered["echo"]  # the answer masked
    seen = {s.path: {name.lower(): value for name, value in s.headers} for s in stack.api.seen}
    assert seen["/v1/models"]["authorization"] == f"Bearer {stack.key}"
    assert seen["/v1/chat"]["authorization"] == f"Bearer {stack.key}"
    wanted = {"/v1/models", "/v1/chat"}
    records = stack.evidence(document["session"], lambda found: {r["path"] for r in found} >= wanted)
    assert {r["path"] for r in records} >= wanted


def test_git_clones_and_pushes_within_the_sessions_operations(
    stack: GatewayStack, namespace: Namespace, tmp_path: Path
) -> None:
    document = stack.issue(stack.task("fix-gw-git"))
    env, inside = stack.client_env(document, HOME=str(tmp_path)), sandboxed(namespace, document)
    clone = tmp_path / "widgets"
    cloned = run(inside("git", "clone", "-q", stack.git_url, str(clone)), env)
    assert cloned.code == 0, cloned.stderr
    author = ["-c", "user.name=agent", "-c", "user.email=agent@example.com"]
    run(["git", *author, "commit", "-q", "--allow-empty", "-m", "work"], env, cwd=clone)
    pushed = run(inside("git", "-C", str(clone), "push", "-q", "origin", "HEAD:refs/heads/agent/fix"), env)
    assert pushed.code == 0, pushed.stderr
    refused = run(inside("git", "-C", str(clone), "push", "origin", "HEAD:refs/heads/main"), env)
    assert refused.code != 0 and "refused by policy" in refused.stderr
    records = stack.evidence(document["session"], lambda found: any(r["decision"] == "refused" for r in found))
    decisions = [r["decision"] for r in records if r["method"] == "POST"]
    assert decisions.count("allowed") >= 1 and decisions.count("refused") == 1


def test_pip_installs_from_an_index_through_the_gateway(
    stack: GatewayStack, namespace: Namespace, tmp_path: Path
) -> None:
    document = stack.issue(stack.task("fix-gw-pip"))
    env = stack.client_env(document, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
    inside = sandboxed(namespace, document)
    index = f"https://{stack.api_host}/simple/"
    target = tmp_path / "site"
    installed = run(
        inside(*python("import pip._internal.cli.main as m; raise SystemExit(m.main())"), "install",
                       "--no-deps", "--target", str(target), "--index-url", index, "gwdemo"),
        env,
    )  # fmt: skip
    assert installed.code == 0, installed.stderr
    assert (target / "gwdemo.py").read_text() == "ANSWER = 42\n"
    wanted = {"/simple/gwdemo/", "/files/gwdemo-1.0-py3-none-any.whl"}
    paths = {r["path"] for r in stack.evidence(document["session"], lambda found: wanted <= {r["path"] for r in found})}
    assert wanted <= paths


def test_boto3_is_re_signed_with_the_sessions_real_keys(stack: GatewayStack, namespace: Namespace) -> None:
    assert stack.aws is not None
    document = stack.issue(stack.task("fix-gw-aws", aws=True))
    env = stack.client_env(document, AWS_EC2_METADATA_DISABLED="true", AWS_MAX_ATTEMPTS="1")
    inside = sandboxed(namespace, document)
    files = Path(document["dir"]) / "store"
    placeholder = (files / "credentials").read_text()
    program = (
        "import boto3, json\n"
        f"s3 = boto3.client('s3', endpoint_url='{stack.aws.url}')\n"
        f"s3.put_object(Bucket='{BUCKET}', Key='gw/hello', Body=b'hello')\n"
        f"body = s3.get_object(Bucket='{BUCKET}', Key='gw/hello')['Body'].read().decode()\n"
        f"who = boto3.client('sts', endpoint_url='{stack.aws.url}').get_caller_identity()['Arn']\n"
        "print(json.dumps({'body': body, 'who': who}))\n"
    )
    result = run(inside(*python(program)), env)
    assert result.code == 0, result.stderr
    answered = values(result)
    assert answered["body"] == "hello" and "assumed-role" in answered["who"]
    for record in stack.records(document["session"], "credential.issued"):
        assert record.get("fingerprint", "") not in placeholder
    records = stack.evidence(document["session"], lambda found: sum(r.get("credential") == "store" for r in found) >= 3)
    resigned = [r for r in records if r.get("credential") == "store"]
    assert len(resigned) >= 3 and all(r["decision"] == "allowed" for r in resigned)
