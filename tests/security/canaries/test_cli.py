"""Canaries through the command line: a secret planted wherever secrets travel must never come out anywhere else.

Every command path is run (issue, status, revoke, sweep, audit, policy check;
plain, ``--debug``, ``--verbose``, ``--log-format json``; success, denial,
provider error, invalid broker key, a crash) and stdout, stderr, the issuance
log and every file in ``state_dir`` are scanned for: the broker's own
credentials (a canary Vault token, a canary "private key", the broker's AWS
secret, the GitHub App key) and every secret the providers minted, captured
from ``Provider.mint`` itself.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from urllib.parse import urlparse

import pytest

from devstack.github_app import GitHubAppEmulator
from tests.fixtures.brokerenv import BrokerEnv, Result, make_env
from tests.fixtures.crash import TWO_CREDENTIALS, add_slow_vault, start_issue, wait_for
from tests.fixtures.github import AppKeys
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.slowproxy import slow_proxy
from tests.fixtures.stack import STACK_TASK
from tests.security.canaries.scan import (
    FLAG_SETS,
    assert_no_vault_token_shapes,
    assert_nowhere,
    canary,
    files_under,
    minted,
    own_secrets,
    run_all,
)

__all__ = ["minted"]  # fixture


ARMOUR = "RSA " + "PRIVATE KEY"  # split so no scanner mistakes the test for key material


# -- (a) the broker's own Vault token ------------------------------------------------------------


@pytest.mark.server
def test_the_brokers_own_vault_token_never_leaks_when_vault_refuses_it(tmp_path: Path, openbao: OpenBao) -> None:
    env = make_env(tmp_path)
    token = canary("vault-token")
    token_file = env.write_secret("vault-token", token)
    env.add_provider(
        "vault", {"type": "vault", "addr": openbao.addr, "token_file": str(token_file), "token_role": "broker-session"}
    )
    task = str(env.write_task(VAULT_TASK))
    issued = run_all(env, "issue", "--task", task, "--json")
    for result in issued:
        assert result.code == 4, result.stderr
        assert "broker: error: vault vault: token create failed" in result.stderr
        assert "Traceback" not in result.stderr
    assert issued[0].stderr.count("\n") == 1 and issued[1].stderr.count("\n") == 1
    others = [
        *run_all(env, "status", "--all", "--json"),
        *run_all(env, "sweep", "--json"),
        *run_all(env, "audit", "list", "--json"),
        *run_all(env, "policy", "check", "--task", task),
    ]
    assert env.session_dirs() == []
    assert_nowhere([token], issued + others, env.state_dir, env.runtime_dir, env.config_path, env.root / "audit.key")


# -- (b) a GitHub App "private key" that is a canary -------------------------------------------

GITHUB_ONLY = """
version: 1
task: fix-build-123
ttl: 30m
sandbox: {uid: 1000, gid: 1000}
credentials:
  - {name: repo, provider: github, repositories: [octo-org/widgets], permissions: {contents: write}}
"""


@pytest.mark.server
@pytest.mark.parametrize("shape", ["plain", "pem-armoured"])
def test_a_github_key_file_holding_a_canary_is_refused_without_echoing_it(stack_env: BrokerEnv, shape: str) -> None:
    secret = canary("github-key")
    content = secret if shape == "plain" else f"-----BEGIN {ARMOUR}-----\n{secret}\n-----END {ARMOUR}-----\n"
    key_file = Path(str(stack_env.providers["github"]["private_key_file"]))
    key_file.write_text(content)
    key_file.chmod(0o600)
    task = str(stack_env.write_task(GITHUB_ONLY))
    results = run_all(stack_env, "issue", "--task", task)
    for result in results:
        assert result.code == 2, result.stderr
        assert "providers.github.private_key_file" in result.stderr and "not a PEM private key" in result.stderr
        assert "Traceback" not in result.stderr
    assert results[0].stderr.count("\n") == 1
    results += run_all(stack_env, "status", "--all", "--json") + run_all(stack_env, "audit", "list", "--json")
    assert stack_env.session_dirs() == []
    assert_nowhere([secret], results, stack_env.state_dir, stack_env.runtime_dir)


# -- (c) success, denial and provider-error paths with every minted secret ----------------------


@pytest.mark.server
def test_a_full_round_trip_with_debug_and_verbose_output_leaks_no_secret(
    stack_env: BrokerEnv, minted: set[str], github_app_keys: AppKeys
) -> None:
    task = str(stack_env.write_task(STACK_TASK))
    issued = [
        stack_env.run("--debug", "issue", "--task", task, "--json"),
        stack_env.run("--verbose", "issue", "--task", task, "--format", "env"),
        stack_env.run("--debug", "--verbose", "--log-format", "json", "issue", "--task", task, "--format", "docker"),
    ]
    assert [r.code for r in issued] == [0, 0, 0], [r.stderr for r in issued]
    assert len(minted) >= 3 * 4  # vault token, AWS secret key and session token, GitHub token; three sessions
    first = issued[0].json()
    leaked = stack_env.root / "leaked.txt"
    leaked.write_text((Path(first["dir"]) / "repo" / "token").read_text())
    results = issued + [
        *run_all(stack_env, "status", "--json"),
        *run_all(stack_env, "status", "--all"),
        *run_all(stack_env, "audit", "list", "--json"),
        *run_all(stack_env, "audit", "list", "--csv"),
        *run_all(stack_env, "audit", "active", "--json"),
        *run_all(stack_env, "audit", "lookup", "--secret-file", str(leaked), "--json"),
        *run_all(stack_env, "audit", "verify"),
        *run_all(stack_env, "policy", "check", "--task", task, "--json"),
        stack_env.run("--debug", "--verbose", "revoke", "--session", first["session"], "--json"),
        stack_env.run("--verbose", "--log-format", "json", "revoke", "--task", "fix-build-123", "--json"),
        *run_all(stack_env, "sweep", "--json"),
        *run_all(stack_env, "status", "--all", "--json"),
    ]
    assert all(r.code == 0 for r in results), [(r.code, r.stderr) for r in results if r.code]
    assert first["session"] in results[-1].stdout
    leaked.unlink()
    assert stack_env.session_dirs() == []
    assert [p for p in files_under(stack_env.runtime_dir)] == []  # .keep is empty again, every session is gone
    assert_nowhere([*minted, *own_secrets(github_app_keys)], results, stack_env.state_dir, stack_env.runtime_dir)
    assert_no_vault_token_shapes(results, stack_env.state_dir)


@pytest.mark.server
def test_denials_and_invalid_manifests_leak_no_live_secret(
    stack_env: BrokerEnv, minted: set[str], github_app_keys: AppKeys
) -> None:
    live = stack_env.run("issue", "--task", str(stack_env.write_task(STACK_TASK)), "--json")
    assert live.code == 0, live.stderr
    denied = str(stack_env.write_task(STACK_TASK.replace("[octo-org/widgets]", "[octo-org/secret-infra]"), "d.yaml"))
    invalid = str(stack_env.write_task(STACK_TASK.replace("name: kv", "name: ../kv"), "i.yaml"))
    results = [
        *run_all(stack_env, "issue", "--task", denied),
        *run_all(stack_env, "policy", "check", "--task", denied, "--json"),
        *run_all(stack_env, "issue", "--task", invalid),
        *run_all(stack_env, "revoke", "--session", "s-doesnotexist"),
        *run_all(stack_env, "audit", "list", "--event", "session.denied", "--json"),
    ]
    assert [r.code for r in results[:12]] == [3] * 8 + [2] * 4
    assert all("Traceback" not in r.stderr for r in results)
    assert_nowhere([*minted, *own_secrets(github_app_keys)], [live, *results], stack_env.state_dir)
    assert stack_env.run("revoke", "--session", live.json()["session"]).code == 0


@pytest.mark.server
def test_a_provider_error_during_issue_leaks_none_of_the_rolled_back_secrets(
    stack_env: BrokerEnv, minted: set[str], github_emulator: GitHubAppEmulator, github_app_keys: AppKeys
) -> None:
    task = str(stack_env.write_task(STACK_TASK))
    results = []
    for flags in (FLAG_SETS[0], FLAG_SETS[-1]):  # each rollback waits on AWS's settle pause; two runs suffice
        github_emulator.force("create_token", 422)  # refused at once: no retries to wait for
        result = stack_env.run(*flags, "issue", "--task", task)
        assert result.code == 4, result.stderr
        assert "Traceback" not in result.stderr
        results.append(result)
    assert minted, "the other providers minted before GitHub failed"
    results += [
        *run_all(stack_env, "status", "--all", "--json"),
        *run_all(stack_env, "sweep", "--json"),
        *run_all(stack_env, "audit", "list", "--json"),
    ]
    assert stack_env.session_dirs() == []
    assert_nowhere([*minted, *own_secrets(github_app_keys)], results, stack_env.state_dir, stack_env.runtime_dir)


# -- (d) a crash in the middle of issue, then sweep ----------------------------------------------


@pytest.mark.server
@pytest.mark.skipif(os.geteuid() != 0, reason="the crash leaves a tmpfs mount only root can make")
def test_a_broker_killed_during_issue_leaks_nothing_through_sweep(vault_env: BrokerEnv, openbao: OpenBao) -> None:
    with slow_proxy(urlparse(openbao.addr).port or 0, delay=30) as proxy:
        add_slow_vault(vault_env, proxy.addr)
        process = start_issue(vault_env, vault_env.write_task(TWO_CREDENTIALS), "--verbose")
        try:
            wait_for(lambda: any(p.name == "token" for p in files_under(vault_env.runtime_dir)))
            [token_path] = [p for p in files_under(vault_env.runtime_dir) if p.name == "token"]
            wait_for(lambda: token_path.stat().st_size > 0)
            kv_token = token_path.read_text()
            process.send_signal(signal.SIGKILL)
            stdout, stderr = process.communicate(timeout=10)
        finally:
            process.kill()
        proxy.delay = 0  # the killed broker's call is gone; sweep's calls go through at once
        crashed = Result(process.returncode, stdout, stderr)
        results = [crashed, *run_all(vault_env, "status", "--all", "--json")]
        results += [vault_env.run(*flags, "sweep", "--json") for flags in FLAG_SETS]
        results += [*run_all(vault_env, "audit", "list", "--json"), *run_all(vault_env, "audit", "active")]
    assert results[5].code == 0, results[5].stderr  # the first sweep recovered the session
    assert vault_env.session_dirs() == []
    assert_nowhere([kv_token], results, vault_env.state_dir, vault_env.runtime_dir)
    assert_no_vault_token_shapes(results, vault_env.state_dir)
