"""The seeds' container pattern end to end: ``scripts/sandbox-run --engine podman`` behind the gateway.

A podman network made with ``--internal --disable-dns`` (the seeds' ``agent-net``): no route out and no
resolver; its gateway address is where ``broker serve``'s gateway listens (TLS), so the gateway is the
network's only member with a way out. ``scripts/sandbox-run --engine podman`` issues the session with
``--gateway``, runs the container (an image this test makes from the host's curl and git) as the manifest's
sandbox user with every capability dropped and a read-only root, and revokes in its trap. Inside, curl reaches
the service with the placeholder (the gateway puts the key in) and git clones through the gateway; nothing is
reachable without it; after the script the session is revoked and its credential refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.aws_iam import IamStack
from tests.fixtures.gateway import GatewayStack, gateway_stack
from tests.fixtures.openbao import OpenBao
from tests.fixtures.podman import ENGINE_ARGS, Network, image, internal_network, unavailable

pytestmark = [pytest.mark.server, pytest.mark.root, pytest.mark.skipif(bool(unavailable()), reason=str(unavailable()))]
SCRIPT = Path(__file__).resolve().parents[4] / "scripts" / "sandbox-run"
BINARIES = (
    "/usr/bin/dash", "/usr/bin/curl", "/usr/bin/git", "/usr/lib/git-core/git", "/usr/lib/git-core/git-remote-https",
    "/usr/lib/git-core/git-remote-http", "/usr/bin/id", "/usr/bin/cat",
)  # fmt: skip


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    with internal_network() as made:
        yield made


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, openbao: OpenBao, iam_moto: IamStack, network: Network
) -> Iterator[GatewayStack]:
    yield from gateway_stack(tmp_path_factory.mktemp("gateway"), openbao, network.gateway)


@pytest.fixture(scope="module")
def agent_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with image(tmp_path_factory.mktemp("image"), BINARIES) as name:
        yield name


def test_sandbox_run_with_podman_behind_the_gateway(stack: GatewayStack, network: Network, agent_image: str) -> None:
    task = stack.task("fix-gw-container")
    inside = f"""
export NO_PROXY= no_proxy=  # the test's upstreams are on the host's loopback; a real host is never exempt
echo "uid=$(id -u)"
echo "service=$(curl -sS -o /dev/null -w '%{{http_code}}' -H "Authorization: Bearer $OPENAI_API_KEY" \
  https://{stack.api_host}/v1/container)"
git clone -q {stack.git_url} /workspace/widgets && echo "cloned=$(cat /workspace/widgets/.git/HEAD)"; echo "gitrc=$?"
curl -sS -m 5 --noproxy '*' https://{stack.api_host}/v1/direct >/dev/null 2>&1; echo "direct=$?"
curl -sS -m 5 --noproxy '*' https://1.1.1.1/ >/dev/null 2>&1; echo "outside=$?"
echo "session=$BROKER_SESSION"
"""
    env = {
        "PATH": os.environ["PATH"],
        "BROKER": f"{sys.executable} -m broker",
        "BROKER_SOCKET": str(stack.daemon.socket),
        "IMAGE": agent_image,
        "NETWORK": network.name,
        "ENGINE_ARGS": " ".join(ENGINE_ARGS),
    }
    argv = [str(SCRIPT), "--engine", "podman", str(task), "--", "sh", "-c", inside]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert values["uid"] == "1000"
    assert values["service"] == "200"
    assert values["cloned"] == "ref: refs/heads/main"
    assert values["direct"] != "0" and values["outside"] != "0"  # no way out but the gateway
    seen = {s.path: {name.lower(): value for name, value in s.headers} for s in stack.api.seen}
    assert seen["/v1/container"]["authorization"] == f"Bearer {stack.key}"
    assert "/v1/direct" not in seen
    session = values["session"]
    assert stack.records(session, "session.revoked"), "the trap revoked the session"
    assert {r["path"] for r in stack.records(session, "egress.request")} >= {"/v1/container"}
    assert stack.key not in done.stdout + done.stderr


def test_sandbox_run_refuses_an_unknown_engine_or_a_missing_image(stack: GatewayStack) -> None:
    task = stack.task("fix-gw-refused")
    env = {
        "PATH": os.environ["PATH"],
        "BROKER": f"{sys.executable} -m broker",
        "BROKER_SOCKET": str(stack.daemon.socket),
    }
    unknown = subprocess.run(
        [str(SCRIPT), "--engine", "lxc", str(task), "--", "true"], capture_output=True, text=True, env=env, check=False
    )
    assert unknown.returncode == 2 and unknown.stderr.strip() == "sandbox-run: --engine is podman or docker, not 'lxc'"
    missing = subprocess.run(
        [str(SCRIPT), "--engine", "podman", str(task), "--", "true"],
        capture_output=True, text=True, env={**env, "IMAGE": "localhost/not-there:1"}, check=False,
    )  # fmt: skip
    assert missing.returncode == 2 and "image 'localhost/not-there:1' is not there" in missing.stderr
    issued = [r for r in stack.env.log_records() if r["event"] == "session.issued" and r["task"] == "fix-gw-refused"]
    assert issued == []  # nothing minted
