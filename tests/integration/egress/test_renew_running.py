"""``broker renew --session S`` of a running exec's proxied credentials: the exec renews them now.

The exec runs a command in bubblewrap that calls a TLS upstream on loopback
with a ``kind: secret`` placeholder, waits, and calls it again. With
``[egress] secret_refresh`` at an hour, nothing but ``broker renew`` can make
the running proxy take the new KV version the test writes in between: the
renew answers with the version it swapped in, the second call reaches the
service with the new value and the same placeholder, and ``credential.renewed``
is logged. A second renew finds the version unchanged; a third, of a current
version destroyed, lists the failure and exits 4, with ``--json`` as without
(before, ``--json`` printed it and exited 0). Through the daemon,
which holds the exec, the same command reaches it. A session whose exec is
gone (killed: the session still active until swept) is refused with one
line and exit 2.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.crash import broker_process
from tests.fixtures.daemon import Daemon, daemon
from tests.fixtures.openbao import ROOT_TOKEN, OpenBao
from tests.fixtures.recording_api import RecordingAPI
from tests.fixtures.sandbox import sandbox_unavailable
from tests.fixtures.tls import make_test_ca
from tests.integration.daemon.test_exec import _client_process, _workspace
from tests.integration.egress.test_any_service import key, service_policy
from tests.integration.egress.test_secret_refresh import TASK
from tests.integration.host.test_exec import workspace

if TYPE_CHECKING:
    from tests.fixtures.tls import TestCA

__all__ = ["daemon"]  # fixture
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

INSIDE = r"""
export NO_PROXY= no_proxy=  # the upstream is on 127.0.0.1 here; a real host is never exempt
call() { curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $OPENAI_API_KEY" "$API/v1/$1"; }
step() { echo "$2" > "/workspace/$1.tmp" && mv "/workspace/$1.tmp" "/workspace/$1"; }
wait_for() { while [ ! -e "/workspace/$1" ]; do sleep 0.05; done; }
step before "$(call before) $(cat /run/secrets/openai/secret)"
wait_for go
step after "$(call after) $(cat /run/secrets/openai/secret)"
"""


@dataclass
class Stage:
    env: BrokerEnv
    api: RecordingAPI
    openbao: OpenBao
    workspace: Path
    first: str
    path: str  # the KV path, new for each test (the OpenBao server is shared by the whole run)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.api.port}"

    @property
    def script(self) -> str:
        return f"export API=https://{self.host}\n{INSIDE}"

    def wait(self, name: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        path = self.workspace / name
        while not path.exists():
            assert time.monotonic() < deadline, f"the command never reached {name}"
            time.sleep(0.05)
        return path.read_text().strip()

    def session(self) -> str:
        return str(next(r for r in self.env.log_records() if r["event"] == "session.issued")["session"])

    def write(self, value: str) -> None:
        self.openbao.client().secrets.kv.v2.create_or_update_secret(path=self.path, secret={"api_key": value})

    def sent(self, path: str) -> str:
        seen = next(s for s in list(self.api.seen) if s.path == path)
        return {k.lower(): v for k, v in seen.headers}["authorization"]


def configure(env: BrokerEnv, openbao: OpenBao, test_ca: TestCA, api: RecordingAPI) -> None:
    env.tables["egress"] = {"upstream_ca_file": str(test_ca.cert_file), "secret_refresh": "1h"}
    env.add_provider(
        "vault",
        {"type": "vault", "addr": openbao.addr, "token_file": str(env.write_secret("vault-token", ROOT_TOKEN))},
    )
    env.write_policy(service_policy(api.port))


@pytest.fixture
def stage(tmp_path: Path, openbao: OpenBao) -> Iterator[Stage]:
    (tmp_path / "ca").mkdir()
    test_ca = make_test_ca(tmp_path / "ca", ["api.test"])
    api = RecordingAPI(test_ca.context)
    env = make_env(tmp_path)
    configure(env, openbao, test_ca, api)
    stage = Stage(env, api, openbao, workspace(tmp_path), key("sk-proj-", 64), f"llm/openai-{secrets.token_hex(4)}")
    stage.write(stage.first)
    try:
        yield stage
    finally:
        env.cleanup()
        api.close()


def test_renew_makes_the_running_exec_swap_in_the_new_kv_version_now(stage: Stage) -> None:
    env = stage.env
    task = env.write_task(TASK.format(host=stage.host, path=stage.path))
    process = broker_process(
        env, "exec", "--task", str(task), "--workspace", str(stage.workspace), "--", "sh", "-c", stage.script
    )
    try:
        status, placeholder = stage.wait("before").split()
        assert status == "200"
        session = stage.session()
        second = key("sk-proj-", 64)
        stage.write(second)
        renewed = env.run_process("renew", "--session", session, "--json")
        assert renewed.code == 0, renewed.stderr
        assert renewed.json() == [
            {"name": "openai", "outcome": "renewed", "version": "2", "previous_version": "1", "proxied": "true"}
        ]
        again = env.run_process("renew", "--session", session)
        assert again.code == 0, again.stderr
        assert again.stdout == "  openai: KV version 2 is still the current one; nothing to swap\n"
        stage.write(key("sk-proj-", 64))
        stage.openbao.client().secrets.kv.v2.destroy_secret_versions(path=stage.path, versions=[3])
        failed = env.run_process("renew", "--session", session, "--json")  # the answer first, then its exit code
        assert failed.code == 4, failed.stderr
        assert [(r["name"], r["outcome"]) for r in failed.json()] == [("openai", "failed")]
        assert failed.stderr.count("\n") == 1 and "renewal of 'openai' failed" in failed.stderr
        (stage.workspace / "go").touch()
        status, after = stage.wait("after").split()
        assert (status, after) == ("200", placeholder)  # the same placeholder in the sandbox
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert stage.sent("/v1/before") == f"Bearer {stage.first}"
    assert stage.sent("/v1/after") == f"Bearer {second}"
    renewals = [r for r in env.log_records() if r["event"] == "credential.renewed"]
    assert [(r["credential"], r["previous_version"], r["version"]) for r in renewals] == [("openai", "1", "2")]
    assert second not in env.log_path.read_text() and second not in renewed.stdout + again.stdout
    assert env.run("audit", "verify").code == 0


def test_renew_without_a_running_exec_is_refused_in_one_line(stage: Stage) -> None:
    env = stage.env
    task = env.write_task(TASK.format(host=stage.host, path=stage.path))
    process = broker_process(
        env, "exec", "--task", str(task), "--workspace", str(stage.workspace), "--", "sh", "-c", stage.script
    )
    try:
        stage.wait("before")
        session = stage.session()
    finally:
        os.kill(process.pid, signal.SIGKILL)  # the exec gone at once: its session stays active until swept
        process.communicate()
    refused = env.run_process("renew", "--session", session)
    assert refused.code == 2, refused.stderr
    assert refused.stderr.count("\n") == 1 and "runs no broker exec on this host" in refused.stderr
    assert "'openai'" in refused.stderr and refused.stdout == ""
    assert "credential.renewed" not in env.events()
    assert env.run("sweep").code == 0  # nothing left behind


def test_through_the_daemon_renew_reaches_the_exec_it_holds(daemon: Daemon, openbao: OpenBao) -> None:
    test_ca = make_test_ca(daemon.shared, ["api.test"])
    api = RecordingAPI(test_ca.context)
    try:
        daemon.env.runtime_dir = daemon.shared / "run"  # as /run/broker: short enough for a socket's address
        configure(daemon.env, openbao, test_ca, api)
        first = key("sk-proj-", 64)
        stage = Stage(daemon.env, api, openbao, _workspace(daemon), first, f"llm/openai-{secrets.token_hex(4)}")
        stage.write(first)
        daemon.start()
        task = daemon.task(TASK.format(host=stage.host, path=stage.path))
        process = _client_process(
            daemon, "exec", "--task", str(task), "--workspace", str(stage.workspace), "--", "sh", "-c", stage.script
        )
        try:
            status, placeholder = stage.wait("before").split()
            assert status == "200"
            second = key("sk-proj-", 64)
            stage.write(second)
            renewed = daemon.client("renew", "--session", stage.session())
            assert renewed.code == 0, renewed.stderr
            assert renewed.stdout == "  openai: KV version 2 behind its placeholder (was 1)\n"
            (stage.workspace / "go").touch()
            status, after = stage.wait("after").split()
            assert (status, after) == ("200", placeholder)
            _, err = process.communicate(timeout=60)
            assert process.returncode == 0, err
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        assert stage.sent("/v1/before") == f"Bearer {first}" and stage.sent("/v1/after") == f"Bearer {second}"
        renewals = [r for r in daemon.env.log_records() if r["event"] == "credential.renewed"]
        assert [(r["credential"], r["previous_version"], r["version"]) for r in renewals] == [("openai", "1", "2")]
    finally:
        api.close()
