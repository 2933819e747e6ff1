"""``kind: secret`` from inside ``broker exec --network allowlist``: any service's key, held by the proxy alone.

Two keys live in OpenBao's KV v2 engine (dev mode's ``secret/``): an
OpenAI-shaped key sent as ``Authorization: Bearer {}`` and an
Anthropic-shaped one sent as ``x-api-key: {}``. The service is a TLS
upstream on loopback that records every header it received (and answers
``/echo`` with them, as an API echoing a key would). In the sandbox, curl
and Python use the placeholders from the environment and the files; the
upstream must receive the real keys in exactly those headers, the sandbox
must never see them (not even echoed back), and a placeholder anywhere else
goes out as the worthless text it is.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.openbao import ROOT_TOKEN, OpenBao
from tests.fixtures.recording_api import RecordingAPI
from tests.fixtures.sandbox import sandbox_unavailable
from tests.fixtures.tls import make_test_ca

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

INSIDE = r"""
export NO_PROXY= no_proxy=  # the upstream is on 127.0.0.1 here; a real host is never exempt
echo "env-openai=$OPENAI_API_KEY"
echo "file-openai=$(cat /run/secrets/openai/secret)"
echo "env-anthropic=$ANTHROPIC_API_KEY"
curl -sS -o /dev/null -w 'curl=%{http_code}\n' -H "Authorization: Bearer $OPENAI_API_KEY" "$API/v1/models"
echo "echo=$(curl -sS -H "Authorization: Bearer $OPENAI_API_KEY" "$API/v1/echo")"
curl -sS -o /dev/null -H "x-other: $OPENAI_API_KEY" -H "Authorization: Bearer $ANTHROPIC_API_KEY" "$API/v1/elsewhere"
/usr/bin/python3 - <<'PY'
import os, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"https": os.environ["HTTPS_PROXY"]}))
request = urllib.request.Request(
    os.environ["API"] + "/v1/messages", data=b"{}", method="POST",
    headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"], "content-type": "application/json"},
)
print("python=" + str(opener.open(request, timeout=20).status))
PY
"""


def key(prefix: str, length: int) -> str:
    alphabet = string.ascii_letters + string.digits + "-_"
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length - len(prefix)))


@dataclass
class Service:
    env: BrokerEnv
    api: RecordingAPI
    openai: str
    anthropic: str

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.api.port}"

    def task(self, *, openai: str = "", hosts: str = "") -> Path:
        hosts = hosts or f'["{self.host}"]'
        return self.env.write_task(
            f"""
            version: 1
            task: fix-build-7
            ttl: 20m
            sandbox: {{uid: 1000, gid: 1000, mount_path: /run/secrets}}
            network:
              allow: ["{self.host}"]
            credentials:
              - name: openai
                provider: vault
                kind: secret
                path: llm/openai
                field: api_key
                inject: proxy
                hosts: {hosts}
                header: "Authorization: Bearer {{}}"
                env: OPENAI_API_KEY{openai}
              - name: anthropic
                provider: vault
                kind: secret
                path: llm/anthropic
                field: api_key
                inject: proxy
                hosts: ["{self.host}"]
                header: "x-api-key: {{}}"
                env: ANTHROPIC_API_KEY
            """
        )


def service_policy(port: int, paths: str = '["llm/*"]', hosts: str = "") -> str:
    hosts = hosts or f'["127.0.0.1:{port}"]'
    return f"""
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["127.0.0.1:{port}"]
    grants:
      - provider: vault
        secret_paths: {paths}
        secret_hosts: {hosts}
        secret_headers: ["Authorization: Bearer {{}}", "x-api-key: {{}}"]
"""


@pytest.fixture
def service(tmp_path: Path, openbao: OpenBao) -> Iterator[Service]:
    (tmp_path / "ca").mkdir()
    test_ca = make_test_ca(tmp_path / "ca", ["api.test"])
    api = RecordingAPI(test_ca.context)
    env = make_env(tmp_path)
    env.tables["egress"] = {"upstream_ca_file": str(test_ca.cert_file)}
    env.add_provider(
        "vault",
        {"type": "vault", "addr": openbao.addr, "token_file": str(env.write_secret("vault-token", ROOT_TOKEN))},
    )
    env.write_policy(service_policy(api.port))
    openai, anthropic = key("sk-proj-", 64), key("sk-ant-api03-", 96)
    kv = openbao.client().secrets.kv.v2
    kv.create_or_update_secret(path="llm/openai", secret={"api_key": openai, "org": "org-1"})
    kv.create_or_update_secret(path="llm/anthropic", secret={"api_key": anthropic})
    try:
        yield Service(env, api, openai, anthropic)
    finally:
        env.cleanup()
        api.close()


def received(api: RecordingAPI, path: str) -> dict[str, str]:
    return {name.lower(): value for name, value in next(s for s in api.seen if s.path == path).headers}


def test_curl_and_python_in_the_sandbox_reach_the_service_with_placeholders(service: Service) -> None:
    task = service.task()
    api = f"https://{service.host}"
    result = service.env.run_process(
        "exec", "--task", str(task), "--", "sh", "-c", f"export API={api}\n{INSIDE}", timeout=120
    )
    assert result.code == 0, result.stderr
    values = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert values["curl"] == "200" and values["python"] == "201"
    openai, anthropic = values["env-openai"], values["env-anthropic"]
    # The sandbox holds placeholders of the keys' shape: the env variable and the file agree.
    assert values["file-openai"] == openai
    assert openai.startswith("sk-proj-") and len(openai) == len(service.openai) and openai != service.openai
    assert anthropic.startswith("sk-ant-api03-") and len(anthropic) == len(service.anthropic)
    # The service received the real keys, each in its own header only.
    assert received(service.api, "/v1/models")["authorization"] == f"Bearer {service.openai}"
    assert received(service.api, "/v1/messages")["x-api-key"] == service.anthropic
    elsewhere = received(service.api, "/v1/elsewhere")
    assert elsewhere["x-other"] == openai  # another header: the placeholder as it is
    assert elsewhere["authorization"] == f"Bearer {anthropic}"  # another secret's header: untouched
    # An API echoing the key shows the sandbox the placeholder, never the key.
    assert received(service.api, "/v1/echo")["authorization"] == f"Bearer {service.openai}"
    assert f"Bearer {openai}" in values["echo"]
    for secret in (service.openai, service.anthropic):
        assert secret not in result.stdout + result.stderr
        assert secret not in service.env.log_path.read_text()
    issued = [r for r in service.env.log_records() if r["event"] == "credential.issued"]
    assert {r["reference"]["path"] for r in issued} == {"llm/openai", "llm/anthropic"}
    assert all(r["reference"]["version"] for r in issued)
    assert service.env.run("audit", "verify").code == 0


def test_a_placeholder_sent_to_another_host_is_worthless(service: Service, tmp_path: Path) -> None:
    """The key goes only to its own hosts: the same placeholder to a host the network allows but the
    credential does not name leaves as the placeholder."""
    (tmp_path / "other").mkdir()
    other = RecordingAPI(make_test_ca(tmp_path / "other", ["other.test"]).context)
    try:
        service.env.write_policy(
            service_policy(service.api.port).replace(
                f'network: ["{service.host}"]', f'network: ["{service.host}", "127.0.0.1:{other.port}"]'
            )
        )
        task = service.task()
        task.write_text(
            task.read_text().replace(
                f'allow: ["{service.host}"]', f'allow: ["{service.host}", "127.0.0.1:{other.port}"]'
            )
        )
        inside = (
            "export NO_PROXY= no_proxy=\n"
            f'curl -sk -o /dev/null -H "Authorization: Bearer $OPENAI_API_KEY" https://127.0.0.1:{other.port}/x'
        )
        result = service.env.run_process("exec", "--task", str(task), "--", "sh", "-c", inside)
        assert result.code == 0, result.stderr
        sent = received(other, "/x")["authorization"]
        assert sent.startswith("Bearer sk-proj-") and service.openai not in sent
    finally:
        other.close()
