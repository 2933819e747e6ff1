"""``broker serve``'s metrics, wired: what the daemon and its clients did, scraped from its socket and its listener.

Everything is done for real through a running daemon (issue, revoke, a
denial, a provider that is down, an exec whose sandbox reaches one allowed
and one refused destination, AWS deny budgets measured by its sweep), then
``GET /metrics`` is read back through Prometheus's own text parser.
``[daemon] metrics_listen`` serves ``/metrics`` alone to whoever reaches it;
who may scrape through the socket is tests/security/daemon/test_metrics_access.py.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from broker.core.broker import Broker
from broker.core.credential.revoke import revoke_credential
from broker.core.inputs.config import load_config
from broker.core.store.states import CredentialState
from broker.telemetry.metrics import BrokerMetrics
from tests.fixtures.approving import APPROVAL_TASK, Group, approval_policy, approvers, pending_request
from tests.fixtures.aws import ROLE_ARN, ROLE_NAME, AwsRole
from tests.fixtures.daemon import WAIT, Daemon, _wait_for, daemon
from tests.fixtures.net import closed_port, free_port
from tests.fixtures.openbao import ROOT_TOKEN, VAULT_TASK, OpenBao
from tests.fixtures.sandbox import sandbox_unavailable
from tests.integration.daemon.test_exec import INSIDE, _start
from tests.integration.egress.test_proxy import Sink, Upstream, sink, upstream
from tests.providers.aws.test_budget import POLICY as AWS_POLICY
from tests.providers.aws.test_budget import TASK as AWS_TASK

__all__ = ["approvers", "daemon", "sink", "upstream"]  # fixtures
pytestmark = pytest.mark.server


Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def http(address: str | tuple[str, int], method: str, target: str) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 exchange on the daemon's socket (a path) or on a TCP address: status, headers, body."""
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(WAIT)
        sock.connect(address)
        sock.sendall(
            f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def samples(body: bytes) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def scrape(daemon: Daemon) -> Samples:
    status, headers, body = http(str(daemon.socket), "GET", "/metrics")
    assert status == 200, body
    assert headers["content-type"] == CONTENT_TYPE_LATEST
    return samples(body)


def with_listener(daemon: Daemon) -> tuple[str, int]:
    port = free_port()
    daemon.env.tables["daemon"]["metrics_listen"] = f"127.0.0.1:{port}"
    daemon.env.write_config()
    return "127.0.0.1", port


def test_the_daemon_counts_what_it_did_on_its_socket_and_its_listener(daemon: Daemon, openbao: OpenBao) -> None:
    address = with_listener(daemon)
    daemon.start()
    issued = daemon.client("issue", "--task", str(daemon.task()), "--json")
    assert issued.code == 0, issued.stderr
    session = issued.json()["session"]
    assert daemon.client("revoke", "--session", session).code == 0
    denied = daemon.client("issue", "--task", str(daemon.task(VAULT_TASK.replace("fix-build-7", "deploy-7"))))
    assert denied.code == 3, denied.stderr

    found = scrape(daemon)
    vault = (("provider", "vault"),)
    assert found["broker_credentials_issued_total"] == {vault: 1.0}
    assert found["broker_credentials_revoked_total"] == {vault: 1.0}
    assert found["broker_credentials_denied_total"] == {vault: 1.0}
    assert found["broker_mint_duration_seconds_count"] == {vault: 1.0}
    assert found["broker_revoke_duration_seconds_count"] == {vault: 1.0}
    assert found["broker_store_up"] == {(): 1.0} and found["broker_sessions_live"] == {(): 0.0}
    assert found.get("broker_credentials_failed_total", {}) == {}

    curl = subprocess.run(  # as the README shows it: curl on the socket, as root
        ["curl", "--silent", "--fail", "--unix-socket", str(daemon.socket), "http://broker/metrics"],
        capture_output=True, timeout=WAIT, check=True,
    )  # fmt: skip
    assert samples(curl.stdout)["broker_credentials_issued_total"] == {vault: 1.0}
    status, headers, body = http(address, "GET", "/metrics")  # [daemon] metrics_listen: the same families
    assert status == 200 and headers["content-type"] == CONTENT_TYPE_LATEST
    assert samples(body)["broker_credentials_issued_total"] == {vault: 1.0}
    assert session.encode() not in body and b"hvs." not in body
    assert http(address, "GET", "/v1/sessions")[0] == 404  # the listener serves the metrics and nothing else
    assert http(address, "POST", "/metrics")[0] == 405


def test_a_request_awaiting_approval_is_counted_until_its_session_is_revoked(
    daemon: Daemon, openbao: OpenBao, approvers: Group
) -> None:
    daemon.env.write_policy(approval_policy(approvers))
    daemon.start()
    assert scrape(daemon)["broker_approvals_pending"] == {(): 0.0}
    asked = daemon.client("issue", "--task", str(daemon.task(APPROVAL_TASK)), "--no-wait")
    assert asked.code == 8, asked.stderr
    request, _ = pending_request(asked.stderr)
    found = scrape(daemon)
    assert found["broker_approvals_pending"] == {(): 1.0} and found["broker_sessions_live"] == {(): 0.0}
    revoked = daemon.client("revoke", "--session", request)  # withdrawn: nobody may approve it any more
    assert revoked.code == 0, revoked.stderr
    assert scrape(daemon)["broker_approvals_pending"] == {(): 0.0}
    assert daemon.env.run("approvals", "--json").json() == []


def test_a_provider_that_is_down_is_counted_as_a_failed_mint(daemon: Daemon, openbao: OpenBao) -> None:
    daemon.env.add_provider(
        "vault-down",
        {"type": "vault", "addr": f"http://127.0.0.1:{closed_port()}", "token_file": str(daemon.env.write_secret(
            "down-token", ROOT_TOKEN)), "timeout": 2},
    )  # fmt: skip
    daemon.env.write_policy(
        "rules:\n  - id: agents\n    tasks: ['fix-*']\n    sandbox_uids: [1000]\n    sandbox_gids: [1000]\n"
        "    grants:\n      - {provider: vault-down, policies: ['ci-*'], max_uses: 100}\n"
    )
    daemon.start()
    failed = daemon.client(
        "issue", "--task", str(daemon.task(VAULT_TASK.replace("provider: vault", "provider: vault-down")))
    )
    assert failed.code == 4, failed.stderr
    found = scrape(daemon)
    assert found["broker_credentials_failed_total"] == {(("operation", "mint"), ("provider", "vault-down")): 1.0}
    assert found["broker_mint_duration_seconds_count"] == {(("provider", "vault-down"),): 1.0}
    assert found.get("broker_credentials_issued_total", {}) == {}


def test_a_revocation_left_pending_is_counted_as_a_failed_revoke(vault_env: Any, openbao: OpenBao) -> None:
    """In process: the daemon's ``Broker`` carries the metrics into the one revocation step every verb shares."""
    issued = vault_env.run("issue", "--task", str(vault_env.write_task(VAULT_TASK)), "--json")
    assert issued.code == 0, issued.stderr
    session = issued.json()["session"]
    vault_env.providers["vault"]["addr"] = f"http://127.0.0.1:{closed_port()}"  # Vault gone before the revoke
    vault_env.write_config()
    broker = Broker.open(load_config(vault_env.config_path))
    broker.metrics = metrics = BrokerMetrics()
    try:
        [record] = broker.store.credentials(session)
        outcome = revoke_credential(broker, session, "fix-build-7", record, broker.clock(), reason="revoke")
    finally:
        broker.close()
    assert outcome == CredentialState.PENDING
    found = samples(metrics.exposition())
    assert found["broker_credentials_failed_total"] == {(("operation", "revoke"), ("provider", "vault")): 1.0}
    assert found["broker_revoke_duration_seconds_count"] == {(("provider", "vault"),): 3.0}  # each attempt timed
    assert found.get("broker_credentials_revoked_total", {}) == {}


@pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable()))
def test_the_egress_proxy_of_an_exec_through_the_daemon_counts_its_decisions(
    daemon: Daemon, openbao: OpenBao, upstream: Upstream, sink: Sink
) -> None:
    task = _start(daemon, upstream)
    result = daemon.client(
        "exec", "--task", str(task), "--", "sh", "-c", INSIDE.format(up=upstream.port, sink=sink.port)
    )
    assert result.code == 3, result.stderr
    assert "allowed=200" in result.stdout and "other=403" in result.stdout
    found = scrape(daemon)
    assert found["broker_egress_requests_total"] == {(("decision", "allowed"),): 1.0, (("decision", "denied"),): 1.0}


def test_the_daemons_sweep_measures_each_aws_roles_deny_budget(
    daemon: Daemon, aws_role: AwsRole, tmp_path: Path
) -> None:
    daemon.env.add_provider("aws", {"type": "aws_sts", "region": "us-east-1", "endpoint_url": aws_role.endpoint_url})
    daemon.env.write_policy(AWS_POLICY)
    daemon.start()
    sessions = []
    for _ in range(3):
        issued = daemon.client("issue", "--task", str(daemon.task(AWS_TASK)), "--json")
        assert issued.code == 0, issued.stderr
        sessions.append(issued.json()["session"])
    assert daemon.client("revoke", "--session", sessions[0]).code == 0
    budget = daemon.env.run("status", "--json").json()[0]["credentials"][0]["deny_budget"]
    role = (("provider", "aws"), ("role", ROLE_NAME))

    def measured() -> bool:  # the daemon sweeps every second; its next turn after the revoke measures the role
        found = scrape(daemon)
        return bool(found.get("broker_deny_budget_used_characters", {}).get(role) == budget["used"])

    _wait_for(measured, "a sweep measuring the deny budget")
    found = scrape(daemon)
    assert budget["used"] > 0 and ROLE_ARN.endswith(ROLE_NAME)
    assert found["broker_deny_budget_reserved_characters"] == {role: float(budget["reserved"])}
    assert found["broker_deny_budget_limit_characters"] == {role: 10240.0}
    assert not any(session in str(found) for session in sessions)
