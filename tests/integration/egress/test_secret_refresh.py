"""``kind: secret`` rotated by its operator while an exec runs: the new KV version swapped in behind the placeholder.

The key lives in OpenBao's KV v2 engine (dev mode's ``secret/``); the
service is a TLS upstream on loopback that records the headers it received.
In bubblewrap, curl keeps calling the service with the placeholder from the
environment (and reads the placeholder file each time) for several seconds.
Mid-run the test writes a new version of the secret, of another length (a
placeholder is fixed for its session, whatever stands behind it): with
``[egress] secret_refresh`` at one second, later requests must reach the
service with the new value, earlier ones with the old, none may fail, the
sandbox's placeholder never changes, and ``credential.renewed`` names the
new version. A current version that is destroyed (the one in use) leaves
the old value in use (``credential.renewal_failed``, once), and a later good
version is swapped in; metadata that cannot be read (the secret's whole history deleted)
leaves the old value in use as well.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.brokerenv import BrokerEnv, Result, make_env
from tests.fixtures.openbao import ROOT_TOKEN, OpenBao
from tests.fixtures.recording_api import RecordingAPI
from tests.fixtures.sandbox import sandbox_unavailable
from tests.fixtures.tls import make_test_ca
from tests.integration.egress.test_any_service import key, service_policy

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

RUN_FOR = 12  # seconds of requests from the sandbox

INSIDE = r"""
export NO_PROXY= no_proxy=  # the upstream is on 127.0.0.1 here; a real host is never exempt
first=$OPENAI_API_KEY
i=0
end=$(( $(date +%s) + RUN_FOR ))
while [ "$(date +%s)" -lt "$end" ]; do
  i=$((i + 1))
  [ "$(cat /run/secrets/openai/secret)" = "$first" ] || echo placeholder=changed
  curl -sS -o /dev/null -w 'status=%{http_code}\n' -H "Authorization: Bearer $OPENAI_API_KEY" "$API/v1/n/$i" \
    || echo status=failed
  sleep 0.2
done
echo "echo=$(curl -sS -H "Authorization: Bearer $OPENAI_API_KEY" "$API/v1/echo")"
echo "placeholder=$first"
"""

TASK = """
version: 1
task: fix-build-7
ttl: 20m
sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
network:
  allow: ["{host}"]
credentials:
  - name: openai
    provider: vault
    kind: secret
    path: {path}
    field: api_key
    inject: proxy
    hosts: ["{host}"]
    header: "Authorization: Bearer {{}}"
    env: OPENAI_API_KEY
"""


@dataclass
class Stage:
    env: BrokerEnv
    api: RecordingAPI
    openbao: OpenBao
    first: str
    path: str  # the KV path, new for each test (the OpenBao server is shared by the whole run)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.api.port}"

    def kv(self) -> Any:
        return self.openbao.client().secrets.kv.v2

    def sent(self) -> list[str]:
        """The Authorization header of each numbered request, in the order the upstream received them."""
        return [
            {k.lower(): v for k, v in s.headers}["authorization"]
            for s in list(self.api.seen)
            if s.path.startswith("/v1/n/")
        ]

    def run(self, midway: Callable[[], None]) -> Result:
        """The exec with its command in the background; ``midway`` once the service saw three requests."""
        task = self.env.write_task(TASK.format(host=self.host, path=self.path))
        inside = f"export API=https://{self.host} RUN_FOR={RUN_FOR}\n{INSIDE}"
        results: list[Result] = []
        runner = threading.Thread(
            target=lambda: results.append(
                self.env.run_process("exec", "--task", str(task), "--", "sh", "-c", inside, timeout=180)
            )
        )
        runner.start()
        deadline = time.monotonic() + 120
        while len(self.sent()) < 3 and runner.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        try:
            assert len(self.sent()) >= 3, "the command never reached the service"
            midway()
        finally:
            runner.join()
        return results[0]


@pytest.fixture
def stage(tmp_path: Path, openbao: OpenBao) -> Iterator[Stage]:
    (tmp_path / "ca").mkdir()
    test_ca = make_test_ca(tmp_path / "ca", ["api.test"])
    api = RecordingAPI(test_ca.context)
    env = make_env(tmp_path)
    env.tables["egress"] = {"upstream_ca_file": str(test_ca.cert_file), "secret_refresh": 1}
    env.add_provider(
        "vault",
        {"type": "vault", "addr": openbao.addr, "token_file": str(env.write_secret("vault-token", ROOT_TOKEN))},
    )
    env.write_policy(service_policy(api.port))
    first, path = key("sk-proj-", 64), f"llm/openai-{secrets.token_hex(4)}"
    openbao.client().secrets.kv.v2.create_or_update_secret(path=path, secret={"api_key": first})
    try:
        yield Stage(env, api, openbao, first, path)
    finally:
        env.cleanup()
        api.close()


def lines(result: Result) -> list[tuple[str, str]]:
    return [(k, v) for k, _, v in (line.partition("=") for line in result.stdout.splitlines()) if _]


def test_a_new_kv_version_reaches_the_service_behind_the_same_placeholder(stage: Stage) -> None:
    second = key("sk-proj-", 80)  # another length: the placeholder stays the one the sandbox holds
    written: list[int] = []

    def rotate() -> None:
        answer = stage.kv().create_or_update_secret(path=stage.path, secret={"api_key": second})
        written.append(int(answer["data"]["version"]))

    result = stage.run(rotate)
    assert result.code == 0, result.stderr
    out = lines(result)
    statuses = [v for k, v in out if k == "status"]
    assert statuses and set(statuses) == {"200"}, statuses  # no request failed, during the swap either
    assert ("placeholder", "changed") not in out
    placeholder = dict(out)["placeholder"]
    assert placeholder.startswith("sk-proj-") and len(placeholder) == len(stage.first)
    sent = stage.sent()
    old, new = f"Bearer {stage.first}", f"Bearer {second}"
    assert set(sent) == {old, new}, "each request carried the old value or the new one, nothing else"
    switched = sent.index(new)
    assert switched > 0 and all(value == new for value in sent[switched:]), "once swapped, it stays swapped"
    # An answer echoing the new, longer value shows the sandbox a stand-in, and its framing holds.
    echo = dict(out)["echo"]
    assert second not in echo and stage.first not in echo and placeholder in echo
    records = stage.env.log_records()
    renewed = [r for r in records if r["event"] == "credential.renewed"]
    assert len(renewed) == 1
    assert renewed[0]["credential"] == "openai"
    assert renewed[0]["version"] == str(written[0]) and renewed[0]["previous_version"] == "1"
    assert renewed[0]["old_value"] == "not revoked (the operator's secret)"
    issued = [r for r in records if r["event"] == "credential.issued"]
    assert [r["reference"]["version"] for r in issued] == ["1", str(written[0])]
    assert issued[1]["renewal_of"] == renewed[0]["renewal_of"]
    for secret in (stage.first, second):
        assert secret not in result.stdout + result.stderr
        assert secret not in stage.env.log_path.read_text()
    assert stage.env.run("audit", "verify").code == 0


def test_a_destroyed_current_version_leaves_the_old_value_then_a_good_one_is_swapped_in(stage: Stage) -> None:
    second = key("sk-proj-", 64)

    def rotate_badly() -> None:
        kv = stage.kv()
        kv.destroy_secret_versions(path=stage.path, versions=[1])  # the version the proxy holds
        deadline = time.monotonic() + 30
        while "credential.renewal_failed" not in stage.env.events() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # another check or two: the failure is not logged again, the old value stays
        kv.create_or_update_secret(path=stage.path, secret={"api_key": second})

    result = stage.run(rotate_badly)
    assert result.code == 0, result.stderr
    statuses = [v for k, v in lines(result) if k == "status"]
    assert statuses and set(statuses) == {"200"}, statuses
    sent = stage.sent()
    old, new = f"Bearer {stage.first}", f"Bearer {second}"
    assert set(sent) == {old, new}  # the value read at issue stayed in use after its version was destroyed
    assert all(value == new for value in sent[sent.index(new) :])
    records = stage.env.log_records()
    failed = [r for r in records if r["event"] == "credential.renewal_failed"]
    assert len(failed) == 1, "a repeated failure is logged once"
    assert "current version 1 is destroyed" in failed[0]["reason"] and failed[0]["version"] == "1"
    renewed = [r for r in records if r["event"] == "credential.renewed"]
    assert [(r["previous_version"], r["version"]) for r in renewed] == [("1", "2")]


def test_unreadable_metadata_leaves_the_old_value_in_use(stage: Stage) -> None:
    def delete_everything() -> None:
        stage.kv().delete_metadata_and_all_versions(path=stage.path)
        deadline = time.monotonic() + 30
        while "credential.renewal_failed" not in stage.env.events() and time.monotonic() < deadline:
            time.sleep(0.1)

    result = stage.run(delete_everything)
    assert result.code == 0, result.stderr
    statuses = [v for k, v in lines(result) if k == "status"]
    assert statuses and set(statuses) == {"200"}, statuses
    assert set(stage.sent()) == {f"Bearer {stage.first}"}  # the value read at issue, to the end
    failed = [r for r in stage.env.log_records() if r["event"] == "credential.renewal_failed"]
    assert len(failed) == 1 and stage.path in failed[0]["reason"]
    assert "credential.renewed" not in stage.env.events()
