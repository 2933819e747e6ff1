"""Traces wired into the commands and the daemon, received by a real OTLP/HTTP receiver decoding the protobuf.

With ``[telemetry] otlp_endpoint``, ``broker issue`` and ``broker revoke``
(the direct CLI, each a process of its own) and the same two through
``broker serve`` must each arrive as one trace: its root (``broker issue``,
``POST /v1/sessions``, ...), the policy decision, each provider call (on the
worker threads that make it, carried into the trace) and each log append,
ids as attributes. The session's own token (read from its file, a canary) is
looked for in every byte the receiver got.
Without ``[telemetry]`` a cold ``issue`` and ``revoke`` import nothing of
OpenTelemetry or ``prometheus_client``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from broker.core.broker import Broker
from broker.core.credential.revoke import revoke_credential
from broker.core.inputs.config import load_config
from broker.core.store.interface import SessionRecord
from broker.core.store.states import CredentialState, SessionState
from broker.telemetry.settings import TelemetryConfig, traces_url
from broker.telemetry.traces import start_tracing
from devstack.otlp import OtlpReceiver, ReceivedSpan
from tests.fixtures.brokerenv import BrokerEnv, Result
from tests.fixtures.daemon import Daemon, daemon
from tests.fixtures.net import closed_port
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.integration.cli.test_cold_imports import loaded_after, telemetry_modules

__all__ = ["daemon"]  # a fixture
pytestmark = pytest.mark.server
ROOT = Path(__file__).resolve().parents[1]


def run(env: BrokerEnv, *args: str) -> Result:
    """The console script in a process of its own (the one tracing this process would be the test's)."""
    done = subprocess.run(
        [sys.executable, "-m", "broker", "--config", str(env.config_path), *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    return Result(done.returncode, done.stdout, done.stderr)


def traced(env: BrokerEnv, receiver: OtlpReceiver) -> None:
    env.tables["telemetry"] = {"otlp_endpoint": receiver.endpoint, "service_name": "broker-test"}
    env.write_config()


def traces(spans: Iterable[ReceivedSpan]) -> dict[str, list[ReceivedSpan]]:
    """Spans by the name of their trace's root."""
    spans = list(spans)
    roots = {span.trace_id: span.name for span in spans if not span.parent_span_id}
    found: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        found.setdefault(roots.get(span.trace_id, "no root"), []).append(span)
    return found


def tree(spans: list[ReceivedSpan]) -> tuple[ReceivedSpan, dict[str, list[ReceivedSpan]]]:
    """The trace's root, and its spans by name; every parent is in the same trace."""
    (root,) = [span for span in spans if not span.parent_span_id]
    ids = {span.span_id for span in spans}
    assert all(span.parent_span_id in ids for span in spans if span is not root)
    named: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return root, named


def check_issue(spans: list[ReceivedSpan], session: str) -> None:
    root, named = tree(spans)
    assert {"policy.decide", "provider.mint", "log.append"} <= set(named)
    assert root.attributes["broker.session.id"] == session and root.attributes["broker.task"] == "fix-build-7"
    (decide,) = named["policy.decide"]
    assert (
        decide.attributes["broker.policy.decision"] == "allowed" and decide.attributes["broker.policy.rule"] == "agents"
    )
    (mint,) = named["provider.mint"]
    assert mint.parent_span_id == root.span_id  # on a minting thread, carried into the trace
    assert mint.attributes == {
        "broker.provider.name": "vault", "broker.provider.type": "vault", "broker.credential.name": "kv",
        "broker.session.id": session, "broker.outcome": "minted",
    }  # fmt: skip
    events = {span.attributes["broker.log.event"] for span in named["log.append"]}
    assert {"credential.issued", "session.issued"} <= events
    assert all(isinstance(span.attributes["broker.log.seq"], int) for span in named["log.append"])


def check_revoke(spans: list[ReceivedSpan], session: str) -> None:
    root, named = tree(spans)
    (revoke,) = named["provider.revoke"]
    assert revoke.parent_span_id == root.span_id  # on a revoking thread, carried into the trace
    assert revoke.attributes["broker.session.id"] == session and revoke.attributes["broker.outcome"] == "revoked"
    assert {"credential.revoked", "session.revoked"} <= {s.attributes["broker.log.event"] for s in named["log.append"]}
    assert root.attributes["broker.session.id"] == session


def no_secret(receiver: OtlpReceiver, *secrets: str) -> None:
    body = b"".join(receiver.bodies)
    assert body and not any(secret.encode() in body for secret in secrets)


def test_direct_issue_and_revoke_are_one_trace_each(
    vault_env: BrokerEnv, openbao: OpenBao, otlp_receiver: OtlpReceiver
) -> None:
    traced(vault_env, otlp_receiver)
    issued = run(vault_env, "issue", "--task", str(vault_env.write_task(VAULT_TASK)), "--json")
    assert issued.code == 0, issued.stderr
    document = issued.json()
    token = Path(document["dir"], "kv", "token").read_text().strip()
    revoked = run(vault_env, "revoke", "--session", document["session"], "--json")
    assert revoked.code == 0, revoked.stderr

    found = traces(otlp_receiver.spans())
    assert set(found) == {"broker issue", "broker revoke"}
    check_issue(found["broker issue"], document["session"])
    check_revoke(found["broker revoke"], document["session"])
    for name in ("broker issue", "broker revoke"):  # a cold command opens its providers' connections on a thread
        (warm,) = tree(found[name])[1]["provider.warm_up"]
        assert warm.attributes == {"broker.provider.name": "vault", "broker.provider.type": "vault"}
    for name in ("broker issue", "broker revoke"):
        root, _ = tree(found[name])
        assert root.attributes["broker.exit_code"] == 0 and root.attributes["broker.outcome"] == "ok"
        assert root.resource["service.name"] == "broker-test"
    no_secret(otlp_receiver, token)


def test_a_failing_command_closes_its_trace_with_the_error_and_its_exit_code(
    vault_env: BrokerEnv, openbao: OpenBao, otlp_receiver: OtlpReceiver
) -> None:
    traced(vault_env, otlp_receiver)
    assert run(vault_env, "status").code == 0  # the store exists: the revoke gets as far as looking the session up
    otlp_receiver.clear()
    failed = run(vault_env, "revoke", "--session", "s-000000000000")
    assert failed.code == 2 and failed.stderr.count("\n") == 1, failed.stderr
    (root,) = [span for span in otlp_receiver.spans() if span.name == "broker revoke"]
    assert root.status == 2 and root.status_message == ""  # never the error's message
    assert root.attributes["error.type"] == "UnknownSession" and root.attributes["broker.exit_code"] == 2


def test_a_command_whose_collector_is_gone_waits_no_longer_than_the_timeout(
    vault_env: BrokerEnv, openbao: OpenBao
) -> None:
    vault_env.tables["telemetry"] = {"otlp_endpoint": f"http://127.0.0.1:{closed_port()}", "timeout": "1s"}
    vault_env.write_config()
    issued = run(vault_env, "issue", "--task", str(vault_env.write_task(VAULT_TASK)), "--json")
    assert issued.code == 0, issued.stderr
    assert issued.stderr.count("traces not delivered") == 1 and "Traceback" not in issued.stderr


def test_daemon_requests_are_one_trace_each(daemon: Daemon, openbao: OpenBao, otlp_receiver: OtlpReceiver) -> None:
    traced(daemon.env, otlp_receiver)
    daemon.start()
    issued = daemon.client("issue", "--task", str(daemon.task()), "--json")
    assert issued.code == 0, issued.stderr
    document = issued.json()
    session = document["session"]
    token = Path(document["dir"], "kv", "token").read_text().strip()
    assert daemon.client("revoke", "--session", session).code == 0
    assert daemon.stop() == 0  # its spans are sent as it stops

    found = traces(otlp_receiver.spans())
    check_issue(found["POST /v1/sessions"], session)
    check_revoke(found["DELETE /v1/sessions/{id}"], session)
    issue_root, _ = tree(found["POST /v1/sessions"])
    assert issue_root.attributes["http.request.method"] == "POST"
    assert issue_root.attributes["http.route"] == "/v1/sessions"
    assert issue_root.attributes["http.response.status_code"] == 201
    assert issue_root.attributes["broker.requester"] == "root"
    assert not any(session in span.name for span in otlp_receiver.spans())  # a route template, never the id
    assert "daemon sweep" in found  # its sweeps are traces of their own
    assert not (set(found) - {"POST /v1/sessions", "DELETE /v1/sessions/{id}", "daemon sweep"})
    no_secret(otlp_receiver, token)


def test_a_cold_issue_and_revoke_without_telemetry_import_no_opentelemetry_or_prometheus(
    vault_env: BrokerEnv, openbao: OpenBao
) -> None:
    env = {"PATH": os.environ["PATH"], "BROKER_CONFIG": str(vault_env.config_path)}
    task = vault_env.write_task(VAULT_TASK)
    code = (
        "from broker.entry import run\n"
        "sys.argv = ['broker', 'issue', '--task', {task!r}, '--session-file', {file!r}]\n"
        "try:\n    run()\nexcept SystemExit as exit:\n    assert not exit.code, exit.code\n"
    )
    session_file = vault_env.root / "session"
    modules = loaded_after(code.format(task=str(task), file=str(session_file)), env)
    assert "broker.core.issuing" in modules and telemetry_modules(modules) == []
    revoke = code.replace(
        "'issue', '--task', {task!r}, '--session-file', {file!r}", "'revoke', '--session', {session!r}"
    )
    modules = loaded_after(revoke.format(session=session_file.read_text().strip()), env)
    assert "broker.core.revoking" in modules and telemetry_modules(modules) == []


def test_the_search_for_what_a_crashed_issue_minted_is_a_span(
    vault_env: BrokerEnv, openbao: OpenBao, otlp_receiver: OtlpReceiver
) -> None:
    """A credential left ``minting`` (its broker died mid-call) is searched for at OpenBao: ``provider.find``."""
    tracing = start_tracing(TelemetryConfig(traces_url(otlp_receiver.endpoint, "t"), timeout=5), host="host-a")
    broker = Broker.open(load_config(vault_env.config_path))
    now = datetime.now(UTC)
    session = "s-crashedissue"
    try:
        broker.store.create_session(
            SessionRecord(session, "fix-build-7", "root", SessionState.ISSUING, now, now + timedelta(minutes=5), "/d",
                          "/m", 1000, 1000, False, None)
        )  # fmt: skip
        broker.store.add_credential(session, "kv", "vault", "vault", {})  # minting: the call's answer never came
        [record] = broker.store.credentials(session)
        assert record.state == CredentialState.MINTING
        revoke_credential(broker, session, "fix-build-7", record, now, reason="sweep")
    finally:
        broker.close()
        tracing.close(timeout=5)
    (find,) = [span for span in otlp_receiver.spans() if span.name == "provider.find"]
    assert find.attributes == {
        "broker.provider.name": "vault", "broker.provider.type": "vault", "broker.credential.name": "kv",
        "broker.session.id": session, "broker.count": 0,
    }  # fmt: skip
