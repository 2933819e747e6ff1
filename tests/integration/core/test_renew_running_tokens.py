"""``broker renew --session S`` of a running exec's proxied tokens: renewed now behind their placeholders.

The stage of ``test_rotation`` (the GitHub emulator and OpenBao behind TLS
fronts), with lifetimes the exec would not renew by itself during the test:
a GitHub token that outlasts the session and a Vault token of ten minutes.
While the command in bubblewrap waits between two calls to each service,
``broker renew`` makes the exec renew both at once: the answer lists them
(the old ones revoked), the second calls succeed with the same placeholders,
the old GitHub token is revoked at the emulator, the old Vault token's
accessor is gone from OpenBao, and each renewal is logged.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.fixtures.crash import broker_process
from tests.fixtures.openbao import OpenBao
from tests.fixtures.sandbox import sandbox_unavailable
from tests.integration.core.test_rotation import Stage, stage

__all__ = ["stage"]  # fixture
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

INSIDE = r"""
export NO_PROXY= no_proxy=  # the fronts are on 127.0.0.1 here; a real host is never exempt
calls() {
  curl -sS -o /dev/null -w '%{http_code} ' -H "Authorization: token $(cat /run/secrets/repo/token)" \
    "https://$GITHUB/installation/repositories"
  curl -sS -o /dev/null -w '%{http_code} ' -H "X-Vault-Token: $(cat /run/secrets/kv/token)" \
    "$VAULT_ADDR/v1/secret/data/ci/build"
  cat /run/secrets/repo/token /run/secrets/kv/token | tr '\n' ' '
}
step() { echo "$2" > "/workspace/$1.tmp" && mv "/workspace/$1.tmp" "/workspace/$1"; }
wait_for() { while [ ! -e "/workspace/$1" ]; do sleep 0.05; done; }
step before "$(calls)"
wait_for go
step after "$(calls)"
"""


def wait(workspace: Path, name: str, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while not (workspace / name).exists():
        assert time.monotonic() < deadline, f"the command never reached {name}"
        time.sleep(0.05)
    return (workspace / name).read_text().strip()


def test_renew_makes_the_running_exec_renew_its_tokens_now(stage: Stage, openbao: OpenBao, tmp_path: Path) -> None:
    task = stage.env.write_task(
        f"""
        version: 1
        task: fix-long-1
        ttl: 20m
        sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
        network:
          allow: ["127.0.0.1:{stage.github}", "127.0.0.1:{stage.vault}"]
        credentials:
          - name: repo
            provider: github
            repositories: [octo-org/widgets]
            permissions: {{contents: read}}
            inject: proxy
          - name: kv
            provider: vault
            policies: [ci-read]
            ttl: 10m
            num_uses: 100
            inject: proxy
        """
    )
    stage.emulator.state.token_ttl = 3600  # outlasts the session: the exec alone would never renew it
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    script = f"export GITHUB=127.0.0.1:{stage.github}\n{INSIDE}"
    process = broker_process(
        stage.env, "exec", "--task", str(task), "--workspace", str(workspace), "--", "sh", "-c", script
    )
    try:
        before = wait(workspace, "before").split()
        assert before[:2] == ["200", "200"], before
        session = next(r for r in stage.env.log_records() if r["event"] == "session.issued")["session"]
        renewed = stage.env.run_process("renew", "--session", session, "--json")
        assert renewed.code == 0, renewed.stderr
        answer = {item["name"]: item for item in renewed.json()}
        assert set(answer) == {"repo", "kv"}
        for item in answer.values():
            assert (item["outcome"], item["old_outcome"], item["proxied"]) == ("renewed", "revoked", "true"), item
        (workspace / "go").touch()
        after = wait(workspace, "after").split()
        assert after[:2] == ["200", "200"], after
        assert after[2:] == before[2:]  # the same placeholders in the files
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    records = stage.env.log_records()
    renewals = sorted(r["credential"] for r in records if r["event"] == "credential.renewed")
    assert renewals == ["kv", "repo"]
    issued = [r for r in records if r["event"] == "credential.issued"]
    assert len(issued) == 4
    tokens = list(stage.emulator.state.tokens)
    assert len(tokens) == 2 and {stage.emulator.state.token_state(t) for t in tokens} == {"revoked"}
    accessors = [r["reference"]["accessor"] for r in issued if r["credential"] == "kv"]
    assert len(accessors) == 2 and not any(openbao.accessor_exists(a) for a in accessors)
    assert stage.env.run("audit", "verify").code == 0
