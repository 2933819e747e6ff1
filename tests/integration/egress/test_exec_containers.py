"""``broker exec --sandbox podman --network allowlist`` for real: the container's only way out is the session's proxy.

The container joins the network namespace the broker made for it (loopback alone, the forwarder to the proxy's
socket in it); the same script as bubblewrap's (``test_exec.py``) runs in it with the image's curl: the allowed
upstream answers through the proxy, any other destination gets 403 and is logged, and a direct connection finds
nothing, since the host's loopback is not in that namespace.
"""

from __future__ import annotations

import pytest

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.containers import PODMAN_OPTIONS, containers_named, podman_image, podman_unavailable
from tests.fixtures.openbao import OpenBao
from tests.integration.egress.test_exec import INSIDE, egress_env, task_with_network
from tests.integration.egress.test_proxy import Sink, Upstream, sink, upstream

__all__ = ["egress_env", "podman_image", "sink", "upstream"]  # fixtures
pytestmark = [pytest.mark.server, pytest.mark.skipif(bool(podman_unavailable()), reason=str(podman_unavailable()))]


def test_the_container_reaches_the_allowed_upstream_through_the_proxy_and_nothing_else(
    egress_env: BrokerEnv, openbao: OpenBao, upstream: Upstream, sink: Sink, podman_image: str
) -> None:
    egress_env.tables["sandbox.podman"] = dict(PODMAN_OPTIONS)
    egress_env.write_config()
    task = task_with_network(egress_env, upstream.port)
    script = INSIDE.format(up=upstream.port, sink=sink.port)
    args = ["exec", "--task", str(task), "--sandbox", "podman", "--image", podman_image, "--", "sh", "-c", script]
    result = egress_env.run_process(*args)
    assert result.code == 3, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "proxy=http://127.0.0.1:3128"
    assert "allowed=200" in lines
    assert lines.count("other=403") == 2
    assert "tunnel-exit=56" in lines  # curl: the CONNECT was answered 403
    assert "direct-exit=7" in lines  # no route out but the proxy
    assert [r["path"] for r in upstream.requests] == ["/through"]
    assert sink.accepted == []
    denied = [r for r in egress_env.log_records() if r["event"] == "egress.denied"]
    assert [(r["destination"], r["count"]) for r in denied] == [(f"127.0.0.1:{sink.port}", 3)]
    assert egress_env.events()[-3:] == ["credential.revoked", "session.revoked", "checkpoint"]
    assert containers_named(f"broker-{denied[0]['session']}") == []


def test_docker_cannot_enforce_an_allowlist_and_says_so_before_anything_is_minted(
    egress_env: BrokerEnv, upstream: Upstream
) -> None:
    task = task_with_network(egress_env, upstream.port)
    args = ["exec", "--task", str(task), "--sandbox", "docker", "--image", "any:1", "--network", "allowlist"]
    result = egress_env.run_process(*args, "--", "true")
    assert result.code == 2
    assert result.stderr.startswith("broker: error: --network allowlist with --sandbox docker:")
    assert "use --sandbox podman or bwrap" in result.stderr and result.stderr.count("\n") == 1
    assert "credential.issued" not in egress_env.events()
