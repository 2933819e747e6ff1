"""Placeholders that outlive the token: a running exec's proxied credentials renewed behind them, for real.

The GitHub emulator's tokens end after 12 seconds instead of an hour, and
the Vault token's ttl is 12 seconds: a command in bubblewrap that keeps
calling GitHub's API and reading from OpenBao through the session's proxy
for 40 seconds crosses several real expiries. It holds one placeholder per
credential the whole time, and every request must succeed: the broker
renews each token before it ends, swaps it into the proxy, revokes the old
one (GitHub says ``revoked`` for it, OpenBao no longer knows its accessor)
and logs ``credential.renewed``; the log verifies.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devstack.github import APP_ID, AppKeys, new_emulator, write_key
from devstack.github_app import GitHubAppEmulator
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.openbao import ROOT_TOKEN, OpenBao
from tests.fixtures.sandbox import sandbox_unavailable
from tests.fixtures.tls import TLSFront, backend_port, make_test_ca

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

LIFETIME = 12  # seconds: GitHub's hour and a Vault token's ttl, shortened so a test crosses real expiries
RUN_FOR = 40

INSIDE = r"""
export NO_PROXY= no_proxy=  # the fronts are on 127.0.0.1 here; a real host is never exempt
first_repo=$(cat /run/secrets/repo/token) first_kv=$(cat /run/secrets/kv/token)
end=$(( $(date +%s) + RUN_FOR ))
while [ "$(date +%s)" -lt "$end" ]; do
  curl -sS -o /dev/null -w 'github=%{http_code}\n' -H "Authorization: token $(cat /run/secrets/repo/token)" \
    "https://$GITHUB/installation/repositories" || echo github=failed
  curl -sS -o /dev/null -w 'vault=%{http_code}\n' -H "X-Vault-Token: $(cat /run/secrets/kv/token)" \
    "$VAULT_ADDR/v1/secret/data/ci/build" || echo vault=failed
  sleep 0.2
done
[ "$first_repo" = "$(cat /run/secrets/repo/token)" ] && [ "$first_kv" = "$(cat /run/secrets/kv/token)" ] \
  && echo placeholders=unchanged
echo "document=$(tr -d '\n' < /run/secrets/session.json)"
"""


@dataclass
class Stage:
    env: BrokerEnv
    emulator: GitHubAppEmulator
    github: int  # the TLS front's port for the emulator
    vault: int  # the TLS front's port for OpenBao


@pytest.fixture
def stage(tmp_path: Path, openbao: OpenBao, github_app_keys: AppKeys) -> Iterator[Stage]:
    (tmp_path / "ca").mkdir()
    test_ca = make_test_ca(tmp_path / "ca", ["fronts.test"])
    emulator = new_emulator(github_app_keys).start()
    emulator.state.token_ttl = LIFETIME
    github = TLSFront(test_ca.context, backend_port(emulator.url))
    vault = TLSFront(test_ca.context, backend_port(openbao.addr))
    env = make_env(tmp_path)
    fronts = {"upstream_ca_file": str(test_ca.cert_file)}
    env.add_provider(
        "vault",
        {
            "type": "vault",
            "addr": openbao.addr,
            "token_file": str(env.write_secret("vault-token", ROOT_TOKEN)),
            "token_role": "broker-session",
            "proxy_hosts": [f"127.0.0.1:{vault.port}"],
            **fronts,
        },
    )
    key = write_key(tmp_path / "app.pem", github_app_keys.private_pem)
    env.add_provider(
        "github",
        {
            "type": "github_app",
            "app_id": str(APP_ID),
            "private_key_file": str(key),
            "api_url": emulator.api_url,
            "proxy_hosts": [f"127.0.0.1:{github.port}"],
            **fronts,
        },
    )
    env.write_policy(
        f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    max_ttl: 8h
    network: ["127.0.0.1:{github.port}", "127.0.0.1:{vault.port}"]
    grants:
      - provider: vault
        policies: ["ci-*"]
        max_uses: 100000
      - provider: github
        repositories: ["octo-org/widgets"]
        permissions: {{contents: read, metadata: read}}
"""
    )
    openbao.client().secrets.kv.v2.create_or_update_secret(path="ci/build", secret={"value": "kept-in-vault"})
    try:
        yield Stage(env, emulator, github.port, vault.port)
    finally:
        env.cleanup()
        github.close()
        vault.close()
        emulator.stop()


def test_one_placeholder_through_several_real_expiries(stage: Stage, openbao: OpenBao, tmp_path: Path) -> None:
    task = stage.env.write_task(
        f"""
        version: 1
        task: fix-long-1
        ttl: 2h
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
            ttl: {LIFETIME}s
            num_uses: 100000
            inject: proxy
        """
    )
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    script = f"export GITHUB=127.0.0.1:{stage.github} RUN_FOR={RUN_FOR}\n{INSIDE}"
    result = stage.env.run_process(
        "exec", "--task", str(task), "--workspace", str(workspace), "--", "sh", "-c", script, timeout=RUN_FOR + 60
    )
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "placeholders=unchanged" in lines
    codes = [line for line in lines if line.startswith(("github=", "vault="))]
    assert len(codes) > 40
    assert set(codes) == {"github=200", "vault=200"}, [c for c in codes if not c.endswith("=200")]
    records = stage.env.log_records()
    renewed = [r for r in records if r["event"] == "credential.renewed"]
    per = {name: [r for r in renewed if r["credential"] == name] for name in ("repo", "kv")}
    # 40 s of 12 s tokens renewed at 5/6 (GitHub) and 2/3 (Vault) of their lifetime: three or more each.
    assert len(per["repo"]) >= 3 and len(per["kv"]) >= 3, {k: len(v) for k, v in per.items()}
    issued = [r for r in records if r["event"] == "credential.issued"]
    assert len(issued) == 2 + len(renewed)
    # Every token is revoked: the renewed ones as they were replaced, the last ones when the command ended.
    tokens = list(stage.emulator.state.tokens)
    assert len(tokens) == 1 + len(per["repo"])
    assert {stage.emulator.state.token_state(t) for t in tokens} == {"revoked"}
    accessors = [r["reference"]["accessor"] for r in issued if r["credential"] == "kv"]
    assert not any(openbao.accessor_exists(a) for a in accessors)
    reasons = [r["reason"] for r in records if r["event"] == "credential.revoked"]
    assert reasons.count("renewed") == len(renewed)
    # session.json was rewritten after each renewal: it names when the secret behind each placeholder ends now.
    document = json.loads(next(line for line in lines if line.startswith("document="))[len("document=") :])
    ends = {c["name"]: c["expires_at"] for c in document["credentials"]}
    for name in ("repo", "kv"):
        assert ends[name] in {r["expires_at"] for r in per[name]}, (name, ends[name])
    assert stage.env.run("audit", "verify").code == 0
