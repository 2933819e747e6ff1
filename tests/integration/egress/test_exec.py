"""``broker exec --network allowlist`` for real: bubblewrap, its own network namespace, the proxy the only way out.

The allowed destination is an HTTP server on the host's loopback, listed as
an IP literal; inside the sandbox's namespace the host's loopback is simply
not there, so a direct connection fails and only the proxy reaches it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.sandbox import python_runtime, sandbox_unavailable, vault_egress_policy
from tests.integration.egress.test_proxy import Sink, Upstream, sink, upstream

__all__ = ["sink", "upstream"]  # fixtures
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]


INSIDE = r"""
echo "proxy=$https_proxy"
curl -sS --noproxy '' -o /dev/null -w 'allowed=%{{http_code}}\n' http://127.0.0.1:{up}/through
curl -sS --noproxy '' -o /dev/null -w 'other=%{{http_code}}\n' http://127.0.0.1:{sink}/
curl -sS --noproxy '' -o /dev/null -w 'other=%{{http_code}}\n' http://127.0.0.1:{sink}/again
curl -sS --noproxy '' -p -o /dev/null http://127.0.0.1:{sink}/ 2>/dev/null; echo "tunnel-exit=$?"
curl -sS --noproxy '*' --max-time 5 -o /dev/null http://127.0.0.1:{up}/direct 2>/dev/null; echo "direct-exit=$?"
exit 3
"""


@pytest.fixture
def egress_env(vault_env: BrokerEnv, upstream: Upstream) -> Iterator[BrokerEnv]:
    vault_env.write_policy(vault_egress_policy(upstream.port))
    yield vault_env


def task_with_network(env: BrokerEnv, port: int) -> Path:
    text = VAULT_TASK.replace("credentials:", f'network:\n  allow: ["127.0.0.1:{port}"]\ncredentials:')
    return env.write_task(text)


def test_only_the_allowed_destination_is_reachable_and_refusals_are_logged(
    egress_env: BrokerEnv, openbao: OpenBao, upstream: Upstream, sink: Sink
) -> None:
    task = task_with_network(egress_env, upstream.port)
    script = INSIDE.format(up=upstream.port, sink=sink.port)
    result = egress_env.run_process("exec", "--task", str(task), "--", "sh", "-c", script)
    assert result.code == 3, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "proxy=http://127.0.0.1:3128"
    assert "allowed=200" in lines
    assert lines.count("other=403") == 2
    assert "tunnel-exit=56" in lines  # curl: the CONNECT was answered 403
    assert "direct-exit=7" in lines  # no route out but the proxy: the host's loopback is not here
    assert [r["path"] for r in upstream.requests] == ["/through"]
    assert sink.accepted == []
    denied = [r for r in egress_env.log_records() if r["event"] == "egress.denied"]
    assert [(r["destination"], r["count"]) for r in denied] == [(f"127.0.0.1:{sink.port}", 3)]
    session = denied[0]["session"]
    assert egress_env.events()[-3:] == ["credential.revoked", "session.revoked", "checkpoint"]
    assert any(r["event"] == "session.revoked" and r["session"] == session for r in egress_env.log_records())


def test_network_none_still_means_no_network_and_no_proxy(egress_env: BrokerEnv, upstream: Upstream) -> None:
    task = task_with_network(egress_env, upstream.port)
    result = egress_env.run_process(
        "exec", "--task", str(task), "--network", "none", "--", "sh", "-c", 'echo "proxy=${https_proxy:-}"'
    )
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines() == ["proxy="]


def test_allowlist_without_a_sandbox_is_refused_before_anything_is_minted(
    egress_env: BrokerEnv, upstream: Upstream
) -> None:
    task = task_with_network(egress_env, upstream.port)
    result = egress_env.run_process(
        "exec", "--task", str(task), "--sandbox", "none", "--network", "allowlist", "--", "true"
    )
    assert result.code == 2
    assert "--network allowlist needs --sandbox bwrap" in result.stderr
    assert "credential.issued" not in egress_env.events()


BOUNDARY_CHECK = Path(__file__).resolve().parents[3] / "scripts" / "boundary-check"


def boundary_check(env: BrokerEnv, upstream: Upstream, *check_args: str) -> tuple[int, list[str]]:
    python, prefix = python_runtime()
    task = task_with_network(env, upstream.port)
    result = env.run_process(
        "exec",
        "--task",
        str(task),
        "--ro-bind",
        prefix,
        "--ro-bind",
        str(BOUNDARY_CHECK),
        "--",
        python,
        str(BOUNDARY_CHECK),
        "--expect-no-network",
        *check_args,
    )
    return result.code, result.stdout.splitlines()


def test_boundary_check_sees_an_arbitrary_destination_blocked_and_the_allowed_one_answer(
    egress_env: BrokerEnv, upstream: Upstream
) -> None:
    code, lines = boundary_check(egress_env, upstream, "--egress-allow", f"127.0.0.1:{upstream.port}")
    assert code == 0, lines
    egress = next(line for line in lines if line.startswith(("PASS egress", "FAIL egress", "SKIP egress")))
    assert egress.startswith("PASS egress: example.com:443: HTTP/1.1 403 "), egress
    assert f"127.0.0.1:{upstream.port}: HTTP/1.1 200 " in egress
    assert any(line.startswith("PASS network") for line in lines), lines


def test_boundary_check_fails_when_an_allowed_destination_does_not_answer(
    egress_env: BrokerEnv, upstream: Upstream, sink: Sink
) -> None:
    code, lines = boundary_check(egress_env, upstream, "--egress-allow", f"127.0.0.1:{sink.port}")
    assert code == 1
    assert any(line.startswith("FAIL egress") and f"127.0.0.1:{sink.port}: HTTP/1.1 403" in line for line in lines)


def test_boundary_check_fails_when_the_arbitrary_destination_gets_through(
    egress_env: BrokerEnv, upstream: Upstream
) -> None:
    allowed = f"127.0.0.1:{upstream.port}"
    code, lines = boundary_check(egress_env, upstream, "--egress-allow", allowed, "--egress-deny", allowed)
    assert code == 1
    assert any(line.startswith("FAIL egress") and f"{allowed}: HTTP/1.1 200" in line for line in lines), lines
