"""``broker exec --sandbox podman`` through the daemon: the client runs the container, the daemon holds the session.

The daemon hands its client the session (with its limits), the proxy's socket and the operator's
``[sandbox.podman]``; the client makes the container's network namespace and runs the engine. The same checks as
bubblewrap's through the daemon (``test_exec.py``): only the allowed upstream answers, the session is revoked when
the command ends, and the session's memory limit ends a hog with the line naming it.
"""

from __future__ import annotations

import pytest

from tests.fixtures.containers import (
    PODMAN_OPTIONS,
    containers_named,
    podman_image,
    podman_unavailable,
    python_library_bind,
)
from tests.fixtures.daemon import Daemon, daemon
from tests.fixtures.openbao import OpenBao
from tests.integration.daemon.test_exec import INSIDE, _accessors, _start, _states
from tests.integration.egress.test_proxy import Sink, Upstream, sink, upstream

__all__ = ["daemon", "podman_image", "sink", "upstream"]  # fixtures
pytestmark = [pytest.mark.server, pytest.mark.skipif(bool(podman_unavailable()), reason=str(podman_unavailable()))]
HOG = "hoard = []\nwhile True:\n    hoard.append(bytearray(1 << 20))\n"


def test_a_container_through_the_daemon_reaches_only_what_is_allowed_and_its_session_is_revoked(
    daemon: Daemon, openbao: OpenBao, upstream: Upstream, sink: Sink, podman_image: str
) -> None:
    daemon.env.tables["sandbox.podman"] = dict(PODMAN_OPTIONS)
    task = _start(daemon, upstream)
    script = INSIDE.format(up=upstream.port, sink=sink.port)
    result = daemon.client(
        "exec", "--task", str(task), "--sandbox", "podman", "--image", podman_image, "--", "sh", "-c", script
    )
    assert result.code == 3, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["token-readable", "proxy=http://127.0.0.1:3128"]
    assert "allowed=200" in lines and "other=403" in lines and "direct-exit=7" in lines
    assert [r["path"] for r in upstream.requests] == ["/through"]
    assert sink.accepted == []
    [(session, state)] = _states(daemon).items()
    assert state == "revoked"
    assert not any(openbao.accessor_exists(accessor) for accessor in _accessors(daemon))
    assert containers_named(f"broker-{session}") == []


def test_the_sessions_memory_limit_holds_in_the_clients_container(
    daemon: Daemon, openbao: OpenBao, upstream: Upstream, podman_image: str
) -> None:
    daemon.env.tables["sandbox.podman"] = dict(PODMAN_OPTIONS)
    task = _start(daemon, upstream)
    task.write_text(
        task.read_text().replace("mount_path: /run/secrets}", "mount_path: /run/secrets, limits: {memory: 64MiB}}")
    )
    args = ["exec", "--task", str(task), "--sandbox", "podman", "--image", podman_image, "--network", "none"]
    result = daemon.client(*args, "--ro-bind", python_library_bind(), "--", "python3", "-c", HOG)
    assert result.code == 137, result.stdout + result.stderr
    assert "broker: the command was killed: it went past sandbox.limits.memory (64MiB)" in result.stderr.splitlines()
    assert list(_states(daemon).values()) == ["revoked"]


def test_limits_a_launcher_that_is_not_root_cannot_enforce_are_refused_before_anything_is_minted(
    daemon: Daemon, openbao: OpenBao, upstream: Upstream
) -> None:
    """The daemon decides, the client runs the sandbox: a client that is not root cannot make the session's cgroup,
    so the daemon refuses its limits before minting, whatever the client says of itself."""
    task = _start(daemon, upstream)
    task.write_text(
        task.read_text().replace("mount_path: /run/secrets}", "mount_path: /run/secrets, limits: {pids: 64}}")
    )
    result = daemon.client("exec", "--task", str(task), "--network", "none", "--", "true", uid=1000)
    assert result.code == 2
    expected = (
        "broker: error: sandbox.limits need a root launcher (root makes the session's cgroup); run exec as root\n"
    )
    assert result.stderr == expected
    assert "credential.issued" not in daemon.env.events()
