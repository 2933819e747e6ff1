"""Traces: spans through ``broker.vocab.tracing`` reach a real OTLP/HTTP receiver decoded, ids only, never a secret.

The receiver (``devstack.otlp``) is a loopback HTTP server decoding the
protobuf the OpenTelemetry SDK's exporter sends, as a collector does. With
tracing off a span is one shared object; with it on, parent and child
spans share a trace (also across the worker threads the core mints on), and
no attribute, status or resource carries what the allow-list refused.
A collector that refuses or hangs holds a process no longer than the
configured bound.
"""

from __future__ import annotations

import enum
import secrets
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from broker.telemetry.settings import TelemetryConfig, parse_telemetry, read_headers, traces_url
from broker.telemetry.traces import Tracing, start_tracing
from broker.vocab import tracing
from broker.vocab.errors import ConfigError, ProviderError
from broker.vocab.fields import Fields
from broker.vocab.secret import Secret
from devstack.otlp import OtlpReceiver, ReceivedSpan, hanging_port
from tests.fixtures.net import closed_port

ROOT = Path(__file__).resolve().parents[3]


def canary(label: str) -> str:
    return f"CANARY-{label}-{secrets.token_hex(12)}"


@pytest.fixture
def traced(otlp_receiver: OtlpReceiver) -> Iterator[Tracing]:
    started = start_tracing(TelemetryConfig(traces_url(otlp_receiver.endpoint, "t"), timeout=5), host="host-a")
    yield started
    started.close(timeout=5)


def by_name(spans: list[ReceivedSpan]) -> dict[str, list[ReceivedSpan]]:
    found: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


# -- tracing off ----------------------------------------------------------------------------


def test_with_tracing_off_a_span_is_one_shared_object_that_does_nothing() -> None:
    assert not tracing.enabled()
    first = tracing.span("provider.mint", provider="vault", credential="db")
    second = tracing.span("log.append", event="session.issued")
    assert first is second is tracing.OFF
    with first as span:
        span.set(outcome="minted")

    def work() -> int:
        return 7

    assert tracing.carried(work) is work


def test_with_tracing_off_an_exception_passes_through_a_span_untouched() -> None:
    error = ProviderError("vault v: refused")
    with pytest.raises(ProviderError) as raised, tracing.span("provider.mint", provider="v"):
        raise error
    assert raised.value is error


# -- the allow-list -------------------------------------------------------------------------


class Outcome(enum.StrEnum):
    REVOKED = "revoked"


def test_only_allowed_attributes_with_plain_values_are_kept() -> None:
    token = canary("token")
    checked, dropped = tracing.checked_attributes(
        {
            "session": "s-0123456789ab",
            "provider": "vault",
            "count": 3,
            "outcome": Outcome.REVOKED,
            "token": token,  # not an allowed name
            "task": Secret(token),  # a secret, under an allowed name
            "credential": "x" * (tracing.MAX_VALUE + 1),  # longer than an id
            "rule": "line\nbreak",  # not printable
            "requester": {"uid": 0},  # not a plain value
            "parent": None,  # not set: not counted as dropped
        }
    )
    assert checked == {
        "broker.session.id": "s-0123456789ab",
        "broker.provider.name": "vault",
        "broker.count": 3,
        "broker.outcome": "revoked",
    }
    assert type(checked["broker.outcome"]) is str
    assert dropped == 5
    assert token not in repr(checked)


# -- a real receiver --------------------------------------------------------------------------


def test_spans_arrive_decoded_with_their_parents_attributes_and_no_secret(
    otlp_receiver: OtlpReceiver, traced: Tracing
) -> None:
    secret, message = canary("secret"), canary("message")
    with tracing.span("broker issue", command="issue", task="fix-1", token=secret) as root:
        with tracing.span("policy.decide", task="fix-1", rule="dev-agents", decision="allow", session=Secret(secret)):
            pass

        def mint(provider: str) -> str:
            with tracing.span("provider.mint", provider=provider, provider_type="vault", credential="db"):
                return provider

        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="mint") as pool:
            assert sorted(pool.map(tracing.carried(mint), ["vault-a", "vault-b"])) == ["vault-a", "vault-b"]
        with pytest.raises(ProviderError), tracing.span("provider.revoke", provider="vault-a") as revoke:
            revoke.set(credential="db", outcome="pending")
            raise ProviderError(f"vault vault-a: {message}")  # a message never leaves the process
        with tracing.span("log.append", event="session.issued", seq=42):
            pass
        root.set(session="s-0123456789ab", outcome="issued")
    assert traced.flush(timeout=10)

    spans = otlp_receiver.wait_for(6)
    named = by_name(spans)
    assert sorted(named) == ["broker issue", "log.append", "policy.decide", "provider.mint", "provider.revoke"]
    (command,) = named["broker issue"]
    assert command.parent_span_id == ""
    assert {span.trace_id for span in spans} == {command.trace_id}
    assert all(span.parent_span_id == command.span_id for span in spans if span is not command)
    assert command.attributes == {
        "broker.command": "issue",
        "broker.task": "fix-1",
        tracing.DROPPED: 1,
        "broker.session.id": "s-0123456789ab",
        "broker.outcome": "issued",
    }
    assert named["policy.decide"][0].attributes == {
        "broker.task": "fix-1",
        "broker.policy.rule": "dev-agents",
        "broker.policy.decision": "allow",
        tracing.DROPPED: 1,
    }
    assert sorted(s.attributes["broker.provider.name"] for s in named["provider.mint"]) == ["vault-a", "vault-b"]
    (revoke_span,) = named["provider.revoke"]
    assert revoke_span.status == 2 and revoke_span.status_message == ""
    assert revoke_span.attributes["error.type"] == "ProviderError"
    assert revoke_span.attributes["broker.exit_code"] == 4
    assert named["log.append"][0].attributes == {"broker.log.event": "session.issued", "broker.log.seq": 42}
    assert command.resource["service.name"] == "broker" and command.resource["host.name"] == "host-a"
    assert command.scope == "broker"
    assert revoke_span.attributes["broker.outcome"] == "pending"
    body = b"".join(otlp_receiver.bodies)
    assert secret.encode() not in body and message.encode() not in body


def test_no_canary_leaves_through_names_secrets_or_messages(otlp_receiver: OtlpReceiver, traced: Tracing) -> None:
    secret = canary("token")
    with pytest.raises(RuntimeError), tracing.span("provider.mint", provider="github", credential="repo") as span:
        span.set(token=secret, private_key=secret, session=Secret(secret), task=secret * 10)
        raise RuntimeError(secret)
    assert traced.flush(timeout=10)
    (received,) = otlp_receiver.wait_for(1)
    assert received.attributes[tracing.DROPPED] == 4
    assert received.attributes["error.type"] == "RuntimeError"
    assert all(secret.encode() not in body for body in otlp_receiver.bodies)


def test_the_collectors_headers_come_from_an_owner_only_file(tmp_path: Path, otlp_receiver: OtlpReceiver) -> None:
    key = canary("api-key")
    headers = tmp_path / "otlp-headers"
    headers.write_text(f"# the collector's key\nX-Api-Key: {key}\n\nX-Tenant: broker\n")
    headers.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        read_headers(headers)
    headers.chmod(0o600)
    settings = TelemetryConfig(traces_url(otlp_receiver.endpoint, "t"), headers_file=headers, timeout=5)
    started = start_tracing(settings, host="host-a")
    try:
        with tracing.span("broker status", command="status"):
            pass
        assert started.flush(timeout=10)
    finally:
        started.close(timeout=5)
    assert otlp_receiver.headers[0]["x-api-key"] == key and otlp_receiver.headers[0]["x-tenant"] == "broker"
    assert all(key.encode() not in body for body in otlp_receiver.bodies)
    headers.write_text("X-Api-Key\n")
    with pytest.raises(ConfigError, match="line 1 is not 'Name: value'"):
        read_headers(headers)


def test_after_close_spans_cost_nothing_again(otlp_receiver: OtlpReceiver) -> None:
    started = start_tracing(TelemetryConfig(traces_url(otlp_receiver.endpoint, "t"), timeout=5), host="h")
    with tracing.span("broker revoke", command="revoke"):
        pass
    assert started.close(timeout=10)
    assert tracing.span("broker revoke") is tracing.OFF
    assert [span.name for span in otlp_receiver.spans()] == ["broker revoke"]


# -- a dead collector -------------------------------------------------------------------------


def timed_close(port: int) -> tuple[bool, float]:
    started = start_tracing(TelemetryConfig(f"http://127.0.0.1:{port}/v1/traces", timeout=1), host="h")
    with tracing.span("broker issue", command="issue"):
        pass
    begin = time.monotonic()
    delivered = started.close()
    return delivered, time.monotonic() - begin


# The bound is the configured timeout (1 s); the SDK alone would wait up to 30 s on shutdown. The margin is
# for a loaded machine: the property is "bounded by the setting", not a speed goal.
BOUND = 1 + 4


def test_a_refusing_collector_holds_close_no_longer_than_the_timeout() -> None:
    delivered, seconds = timed_close(closed_port())
    assert not delivered and seconds < BOUND


def test_a_hanging_collector_holds_close_no_longer_than_the_timeout() -> None:
    with hanging_port() as port:
        delivered, seconds = timed_close(port)
    assert not delivered and seconds < BOUND


def test_a_process_tracing_to_a_hanging_collector_exits_within_the_bound(tmp_path: Path) -> None:
    with hanging_port() as port:
        program = textwrap.dedent(
            f"""
            from broker.telemetry.settings import TelemetryConfig
            from broker.telemetry.traces import start_tracing
            from broker.vocab.tracing import span
            tracing = start_tracing(TelemetryConfig("http://127.0.0.1:{port}/v1/traces", timeout=1), host="h")
            for n in range(50):
                with span("provider.mint", provider="vault", count=n):
                    pass
            import time
            begin = time.monotonic()
            delivered = tracing.close()
            print("delivered" if delivered else "not delivered", time.monotonic() - begin)
            """
        )
        begin = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
        )
        seconds = time.monotonic() - begin
    assert done.returncode == 0, done.stderr
    verdict, closing = done.stdout.strip().rsplit(" ", 1)
    assert verdict == "not delivered"
    # One warning line on the broker's logger, nothing of the SDK's own retries and tracebacks.
    assert done.stderr.count("traces not delivered") == 1 and "Traceback" not in done.stderr
    # The process's close waited the bound, not the SDK's 30 s; the whole run (the interpreter's start and the
    # SDK's import on a loaded machine on top) ends well before the SDK alone would have let it.
    assert float(closing) < BOUND and seconds < 30


def test_without_the_extra_start_tracing_names_it() -> None:
    program = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry"] = None  # as on an installation without broker[otel]
        from broker.telemetry.settings import TelemetryConfig
        from broker.telemetry.traces import start_tracing
        from broker.vocab.errors import ConfigError
        try:
            start_tracing(TelemetryConfig("http://127.0.0.1:4318/v1/traces"), host="h")
        except ConfigError as exc:
            print(exc.message)
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == (
        "[telemetry] otlp_endpoint needs OpenTelemetry: pip install 'scoped-credential-broker[otel]'"
    )


# -- [telemetry] --------------------------------------------------------------------------------


def parsed(table: dict[str, object], base: Path = Path("/etc/broker")) -> TelemetryConfig | None:
    return parse_telemetry(Fields(table, "telemetry", ConfigError), base)


def test_telemetry_settings_read_with_their_defaults() -> None:
    assert parsed({}) is None
    settings = parsed({"otlp_endpoint": "http://127.0.0.1:4318"})
    assert settings == TelemetryConfig("http://127.0.0.1:4318/v1/traces", "broker", None, None, 1)
    full = parsed(
        {
            "otlp_endpoint": "https://otel.example.com/custom/traces",
            "service_name": "broker-eu1",
            "headers_file": "otlp-headers",
            "ca_file": "/etc/ssl/collector.pem",
            "timeout": "3s",
        }
    )
    assert full == TelemetryConfig(
        "https://otel.example.com/custom/traces",
        "broker-eu1",
        Path("/etc/broker/otlp-headers"),
        Path("/etc/ssl/collector.pem"),
        3,
    )
    assert parsed({"otlp_endpoint": "http://[::1]:4318/"}) == TelemetryConfig("http://[::1]:4318/v1/traces")
    assert parsed({"otlp_endpoint": "http://localhost:4318"}) == TelemetryConfig("http://localhost:4318/v1/traces")


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ({"otlp_endpoint": "http://otel.example.com:4318"}, "plain http:// only to a collector on loopback"),
        ({"otlp_endpoint": "https://user:pw@otel.example.com"}, "no user or password in the URL"),
        ({"otlp_endpoint": "https://otel.example.com/v1/traces?key=k"}, "no query or fragment"),
        ({"otlp_endpoint": "grpc://127.0.0.1:4317"}, "is not an http:// or https:// URL"),
        ({"otlp_endpoint": "http://127.0.0.1:99999"}, "is not a URL"),
        ({"otlp_endpoint": "http://127.0.0.1:4318", "timeout": "1m"}, "telemetry.timeout: at most 10s"),
        ({"service_name": "broker"}, "telemetry.otlp_endpoint: required by the other [telemetry] keys"),
        ({"otlp_endpoint": "http://127.0.0.1:4318", "headers": {"a": "b"}}, "telemetry.headers: unknown key"),
        ({"otlp_endpoint": "http://127.0.0.1:4318", "service_name": "a b"}, "telemetry.service_name"),
    ],
)
def test_unsafe_or_malformed_telemetry_settings_are_one_line_errors(table: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parsed(table)
    assert fragment in raised.value.message
    assert "pw@" not in raised.value.message


def test_the_config_file_carries_telemetry(tmp_path: Path) -> None:
    from broker.core.inputs.config import load_config

    path = tmp_path / "broker.toml"
    path.write_text(
        'state_dir = "s"\nruntime_dir = "/run/b"\npolicy_dir = "p"\n'
        '[telemetry]\notlp_endpoint = "http://127.0.0.1:4318"\nheaders_file = "h"\n'
    )
    config = load_config(path)
    assert config.telemetry == TelemetryConfig("http://127.0.0.1:4318/v1/traces", headers_file=tmp_path / "h")
    path.write_text('state_dir = "s"\nruntime_dir = "/run/b"\npolicy_dir = "p"\n')
    assert load_config(path).telemetry is None
