"""A cold broker opens its provider connections early, and its calls then use exactly those.

``Warming.warm_up`` (started by ``issue`` as soon as it knows the manifest's
providers, by ``revoke`` as soon as it knows the session's) opens kept-alive
connections while the broker does local work; counted at a proxy in front of
each real server, the calls that follow open none of their own: the
handshakes were paid off the critical path, never twice.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from devstack.github_app import GitHubAppEmulator
from devstack.openbao import ROOT_TOKEN, OpenBao
from providers.overlap import together
from providers.vault.client import VaultSession
from providers.vault.provider import VaultProvider
from tests.fixtures.aws import AwsRole, make_aws_provider
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.crash import add_github, github_tokens, wait_for
from tests.fixtures.github import AppKeys, MakeProvider
from tests.fixtures.latencyproxy import latency_proxy
from tests.fixtures.slowproxy import slow_proxy

pytestmark = pytest.mark.server

CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def test_a_warmed_aws_provider_reads_and_assumes_on_the_connections_it_opened(aws_role: AwsRole) -> None:
    """Three IAM connections (a reservation's three reads go at once) and one STS connection, no more."""
    with latency_proxy(port_of(aws_role.endpoint_url)) as proxy:
        provider = make_aws_provider(proxy.addr)
        try:
            provider.warm_up(True)
            wait_for(lambda: proxy.connections == 4)  # the proxy counts them as it accepts them
            iam = provider.clients.client("iam")
            together(
                lambda: iam.get_role(RoleName=aws_role.name),
                lambda: iam.list_role_policies(RoleName=aws_role.name),
                lambda: iam.get_role(RoleName=aws_role.name),
            )
            provider.clients.client("sts").get_caller_identity()
            assert sorted(proxy.calls()) == ["GetCallerIdentity", "GetRole", "GetRole", "ListRolePolicies"]
            assert proxy.connections == 4
        finally:
            provider.close()


def test_a_revocation_warms_no_sts_client(aws_role: AwsRole) -> None:
    with latency_proxy(port_of(aws_role.endpoint_url)) as proxy:
        provider = make_aws_provider(proxy.addr)
        try:
            provider.warm_up(False)
            wait_for(lambda: proxy.connections == 3)
            assert provider.clients.services() == ["iam"]
        finally:
            provider.close()


def test_a_warmed_github_provider_calls_on_its_connection_with_a_ca_bundle_in_the_environment(
    github_emulator: GitHubAppEmulator, make_github_provider: MakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``REQUESTS_CA_BUNDLE`` sends requests' calls to another pool than the session's own settings name:
    the connection must be opened in the pool the calls use."""
    if not os.path.exists(CA_BUNDLE):
        pytest.skip(f"no {CA_BUNDLE}")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", CA_BUNDLE)
    with slow_proxy(port_of(github_emulator.api_url), 0.0, every_request=True) as proxy:
        provider = make_github_provider(api_url=proxy.addr)
        provider.warm_up(True)
        wait_for(lambda: proxy.connections == 1)
        assert provider.installation_id("octo-org", "widgets")
        assert (proxy.requests, proxy.connections) == (1, 1)


def test_a_warmed_vault_provider_calls_on_its_connection(openbao: OpenBao, tmp_path: Path) -> None:
    token = tmp_path / "vault-token"
    token.write_text(ROOT_TOKEN)
    token.chmod(0o600)
    with slow_proxy(port_of(openbao.addr), 0.0, every_request=True) as proxy:
        provider = VaultProvider(
            VaultSession(
                "vault", addr=proxy.addr, token_file=token, approle=None, approle_mount="approle",
                namespace=None, token_role=None, timeout=5,
            )
        )  # fmt: skip
        try:
            provider.warm_up(True)
            wait_for(lambda: proxy.connections == 1)
            assert provider.vault.client().auth.token.lookup_self()["data"]["id"]
            assert (proxy.requests, proxy.connections) == (1, 1)
        finally:
            provider.close()


def test_a_cold_revoke_of_a_github_token_imports_no_jwt_and_revokes_it(
    broker_env: BrokerEnv, github_emulator: GitHubAppEmulator, github_app_keys: AppKeys
) -> None:
    """The token revokes itself: a cold revoke loads no JWT library, and the token is dead afterwards."""
    task = add_github(broker_env, github_emulator, github_app_keys)
    issued = broker_env.run("issue", "--task", str(task), "--json")
    assert issued.code == 0, issued.stderr
    code = (
        "import sys\n"
        "from broker.cli.app import main\n"
        f"code = main(['--config', {str(broker_env.config_path)!r}, 'revoke', '--session', sys.argv[1]])\n"
        "print(code, 'jwt' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, issued.json()["session"]], capture_output=True, text=True, check=False
    )
    assert done.stdout.splitlines()[-1] == "0 False", done.stderr
    assert set(github_tokens(github_emulator).values()) == {"revoked"}
