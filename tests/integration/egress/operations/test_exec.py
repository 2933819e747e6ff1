"""Operations from inside ``broker exec --network allowlist`` (bubblewrap) and through the daemon, for real.

The sandbox's only way out is the session's proxy; the policy's rule limits
what it may do on the hosts it reaches: git pushes only to ``agent/*`` and
no deletions (``git http-backend`` behind TLS), no merges, approvals or
unlisted GraphQL mutations on a stand-in GitHub API, read-only on a package
index (both TLS upstreams that record what reached them). The clients are
the real git, curl and gh, with the session's hints alone. Go never proxies
a loopback address, so the API host has a name: the broker (or the daemon)
runs in a mount namespace of its own whose ``/etc/hosts`` names it
(``named_loopback``); the sandbox itself resolves nothing. Every request is
then an ``egress.request`` record that ``audit list`` shows and ``audit
verify`` checks, and none holds the session's secret.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.host import mounts
from devstack.git_http import GitHTTPServer, bare_repository, git_env
from tests.fixtures.brokerenv import BrokerEnv, Result
from tests.fixtures.daemon import Daemon, daemon
from tests.fixtures.net import named_loopback
from tests.fixtures.openbao import OpenBao
from tests.fixtures.recording_api import RecordingAPI
from tests.fixtures.sandbox import sandbox_unavailable
from tests.fixtures.tls import make_test_ca

__all__ = ["daemon"]
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

RULE = "ops-agents"
API = "ghe.test"
MERGE = "repos/octo/widgets/pulls/7/merge"
# A made-up token of GitHub's shape for gh to start with (no credential of any session): built here so
# that no token-shaped string stands in the source.
DUMMY_TOKEN = "ghs_" + "0123456789abcdef" * 2 + "0123"

INSIDE = r"""
export NO_PROXY= no_proxy=  # the upstreams are on 127.0.0.1 here; a real host is never exempt
export GH_ENTERPRISE_TOKEN=DUMMY_TOKEN GH_NO_UPDATE_NOTIFIER=1 GH_PROMPT_DISABLED=1
echo "token=$(cat /run/secrets/kv/token)"
g() { git -c user.name=agent -c user.email=agent@example.invalid "$@"; }
cd /workspace
g clone -q "$GIT_URL" work && cd work && echo change > change.txt && g add change.txt && g commit -qm change
g push -q origin HEAD:refs/heads/agent/x; echo "push-agent=$?"
g push origin HEAD:refs/heads/main 2>&1; echo "push-main=$?"
g push origin HEAD:refs/heads/agent/y HEAD:refs/heads/main 2>&1; echo "push-two=$?"
g push origin --delete agent/x 2>&1; echo "push-delete=$?"
cd /workspace
A="https://$GH_HOST/api/v3"
curl -sS -w '\ncurl-merge=%{http_code}\n' -X PUT -H "Authorization: Bearer $(cat /run/secrets/kv/token)" "$A/MERGE"
curl -sS -o /dev/null -w 'curl-pulls=%{http_code}\n' "$A/repos/octo/widgets/pulls?state=open"
curl -sS -o /dev/null -w 'index-get=%{http_code}\n' "$INDEX_URL/simple/"
curl -sS -w '\nindex-post=%{http_code}\n' -X POST -d x=1 "$INDEX_URL/upload"
if command -v gh >/dev/null; then
  gh api -X PUT MERGE 2>&1; echo "gh-merge=$?"
  gh api -X POST repos/octo/widgets/pulls/7/reviews -f event=APPROVE 2>&1; echo "gh-approve=$?"
  gh api graphql -f query='mutation { mergePullRequest(input: {pullRequestId: "PR_1"}) { clientMutationId } }' 2>&1
  echo "gh-mutation=$?"
  gh api repos/octo/widgets/pulls >/dev/null; echo "gh-pulls=$?"
  gh api -X POST repos/octo/widgets/pulls/7/reviews -f event=COMMENT -f body=nits >/dev/null; echo "gh-comment=$?"
  gh api graphql -f query='query { viewer { login } }' >/dev/null; echo "gh-query=$?"
fi
""".replace("MERGE", MERGE).replace("DUMMY_TOKEN", DUMMY_TOKEN)


@dataclass
class Upstreams:
    git: GitHTTPServer
    api: RecordingAPI
    index: RecordingAPI
    repository: Path
    hosts: Path  # an /etc/hosts that names the API host

    def ref(self, name: str) -> str | None:
        done = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", name],
            cwd=self.repository,
            env=git_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip() or None

    def policy(self) -> str:
        g, a, i = self.git.port, self.api.port, self.index.port
        return f"""
rules:
  - id: {RULE}
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["127.0.0.1:{g}", "{API}:{a}", "127.0.0.1:{a}", "127.0.0.1:{i}"]
    operations:
      git: {{hosts: ["127.0.0.1:{g}"], push: ["refs/heads/agent/*"], delete: false}}
      github_api:
        hosts: ["{API}:{a}"]
        allow: ["GET *", "POST /api/v3/repos/*/*/pulls/*/reviews"]
        deny: ["PUT /api/v3/repos/*/*/pulls/*/merge"]
        reviews: {{approve: false}}
        graphql_mutations: [addComment]
      http: {{"127.0.0.1:{i}": {{methods: [GET, HEAD]}}}}
    grants:
      - provider: vault
        policies: ["ci-*"]
        max_uses: 100
"""

    def task(self) -> str:
        g, a, i = self.git.port, self.api.port, self.index.port
        return f"""
version: 1
task: fix-widgets-1
ttl: 20m
network:
  allow: ["127.0.0.1:{g}", "{API}:{a}", "127.0.0.1:{a}", "127.0.0.1:{i}"]
sandbox:
  uid: 1000
  gid: 1000
  mount_path: /run/secrets
  env:
    GIT_URL: "https://127.0.0.1:{g}/octo/widgets.git"
    GH_HOST: "{API}:{a}"
    INDEX_URL: "https://127.0.0.1:{i}"
credentials:
  - {{name: kv, provider: vault, policies: [ci-read], ttl: 10m, num_uses: 5}}
"""


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[Upstreams]:
    (tmp_path / "ca").mkdir()
    test_ca = make_test_ca(tmp_path / "ca", [API])
    root = tmp_path / "repos"
    repository = bare_repository(root, "octo/widgets.git")
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n127.0.0.1 {API}\n")
    hosts.chmod(0o644)
    api, index = RecordingAPI(test_ca.context), RecordingAPI(test_ca.context)
    with GitHTTPServer(root, context=test_ca.context) as git:
        upstreams = Upstreams(git, api, index, repository, hosts)
        upstreams.ca_file = test_ca.cert_file  # type: ignore[attr-defined]
        yield upstreams
    api.close()
    index.close()


def configure(env: BrokerEnv, upstreams: Upstreams) -> None:
    env.tables["egress"] = {"upstream_ca_file": str(upstreams.ca_file)}  # type: ignore[attr-defined]
    env.write_config()
    env.write_policy(upstreams.policy())


def workspace(parent: Path) -> Path:
    path = parent / "workspace"
    path.mkdir()
    os.chown(path, 1000, 1000)
    return path


def values(result: Result) -> dict[str, str]:
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line and " " not in line)


def check_the_session(env: BrokerEnv, upstreams: Upstreams, result: Result, *, gh: bool) -> None:
    """What the sandbox saw, what reached the upstreams, and the evidence in the log."""
    seen = values(result)
    output = result.stdout
    assert seen["push-agent"] == "0", output + result.stderr
    assert seen["push-main"] == "1" and f"! [remote rejected] HEAD -> main (refused by policy {RULE})" in output
    assert seen["push-two"] == "1" and "! [remote rejected] HEAD -> agent/y (refused by policy" in output
    assert seen["push-delete"] == "1" and "! [remote rejected] agent/x (refused by policy" in output
    assert upstreams.ref("refs/heads/agent/x") is not None and upstreams.ref("refs/heads/agent/y") is None
    assert len(upstreams.git.pushes()) == 1
    assert seen["curl-merge"] == "403" and f'"message": "refused by policy {RULE}: PUT /api/v3/{MERGE}' in output
    assert (seen["curl-pulls"], seen["index-get"], seen["index-post"]) == ("200", "200", "403")
    assert f"refused by policy {RULE}: POST is not among the methods for 127.0.0.1:{upstreams.index.port}" in output
    expected = [("GET", "/api/v3/repos/octo/widgets/pulls?state=open")]
    if gh:
        assert (seen["gh-merge"], seen["gh-approve"], seen["gh-mutation"]) == ("1", "1", "1"), output
        assert "a review with event APPROVE: reviews.approve is false" in output and "mergePullRequest" in output
        assert (seen["gh-pulls"], seen["gh-comment"], seen["gh-query"]) == ("0", "0", "0"), output
        expected += [
            ("GET", "/api/v3/repos/octo/widgets/pulls"),
            ("POST", "/api/v3/repos/octo/widgets/pulls/7/reviews"),
            ("POST", "/api/graphql"),
        ]
    assert upstreams.api.requests() == expected
    assert upstreams.index.requests() == [("GET", "/simple/")]

    [session] = {r["session"] for r in env.log_records() if r["event"] == "session.issued"}
    listed = env.run("audit", "list", "--event", "egress.request", "--session", session, "--json")
    assert listed.code == 0, listed.stderr
    records = [json.loads(line) for line in listed.stdout.splitlines()]
    refused = [(r["method"], r["path"]) for r in records if r["decision"] == "refused"]
    pushes = ("POST", "/octo/widgets.git/git-receive-pack")
    assert refused[:3] == [pushes] * 3
    assert ("PUT", f"/api/v3/{MERGE}") in refused and ("POST", "/upload") in refused
    assert len(refused) == 5 + (3 if gh else 0)
    assert {r["rule"] for r in records if r["decision"] == "refused"} == {RULE}
    assert all(r["head_sha256"] and r["body_sha256"] and r["task"] == "fix-widgets-1" for r in records)
    allowed = [r for r in records if r["decision"] == "allowed"]
    assert len(allowed) == sum(1 for r in records) - len(refused) and all(r["upstream_status"] for r in allowed)
    table = env.run("audit", "list", "--event", "egress.request", "--session", session)
    columns = ["seq", "time", "session", "credential", "method", "host", "path", "decision", "rule", "status"]
    assert table.stdout.split()[:10] == columns
    verified = env.run("audit", "verify")
    assert verified.code == 0, verified.stderr
    # The canary: the session's real token went out in a header (inject: file) and is in no record.
    token = seen["token"]
    assert len(token) > 20 and token not in env.log_path.read_text()
    events = [r["event"] for r in env.log_records() if r.get("session") == session]
    assert events.index("session.revoked") > max(i for i, e in enumerate(events) if e == "egress.request")


def test_exec_s_sandbox_pushes_only_to_agent_refs_and_cannot_merge_or_approve(
    vault_env: BrokerEnv, openbao: OpenBao, upstreams: Upstreams, tmp_path: Path
) -> None:
    configure(vault_env, upstreams)
    task = vault_env.write_task(upstreams.task())
    argv = [sys.executable, "-m", "broker.cli", "--config", str(vault_env.config_path), "exec", "--task", str(task)]
    argv += ["--workspace", str(workspace(tmp_path)), "--", "sh", "-c", INSIDE]
    done = subprocess.run([*named_loopback(upstreams.hosts), *argv], capture_output=True, text=True, timeout=300)
    result = Result(done.returncode, done.stdout, done.stderr)
    assert result.code == 0, result.stdout + result.stderr
    check_the_session(vault_env, upstreams, result, gh=os.path.exists("/usr/bin/gh"))


def test_the_same_limits_hold_through_the_daemon(
    daemon: Daemon, openbao: OpenBao, upstreams: Upstreams, tmp_path: Path
) -> None:
    # The daemon runs in its own mount namespace (its /etc/hosts): the session directories it makes must be
    # visible to the client, so they live on one tmpfs mounted beforehand, outside that namespace.
    runtime = daemon.env.runtime_dir
    runtime.mkdir(mode=0o700, exist_ok=True)
    mounts.mount_tmpfs(runtime, size="16m", mode=0o700, uid=0, gid=0)
    try:
        daemon.env.settings["mount_tmpfs"] = "never"
        configure(daemon.env, upstreams)
        daemon.start(prefix=named_loopback(upstreams.hosts))
        task = daemon.task(upstreams.task())
        result = daemon.client(
            "exec",
            "--task",
            str(task),
            "--workspace",
            str(workspace(daemon.shared)),
            "--",
            "sh",
            "-c",
            INSIDE,
            timeout=300,
        )
        assert result.code == 0, result.stdout + result.stderr
        check_the_session(daemon.env, upstreams, result, gh=os.path.exists("/usr/bin/gh"))
    finally:
        if daemon.process is not None:
            daemon.stop()
        daemon.env.cleanup()
        mounts.unmount(runtime)
