"""Canaries through ``broker exec`` via the daemon with ``inject: proxy``: the real token stays in the daemon.

The sandboxed command shows everything it can reach (its environment, every
file under /run/secrets, OpenBao's ``lookup-self`` answer through the proxy,
headers included, which names the token); the client runs at ``--debug
--verbose`` and so does the daemon. The one Vault token the client, the
sandbox and the daemon's log may show is the placeholder: any other
token-shaped string is the real token leaking. The real token is read back at
the end from the proxy's own answer masking (it must differ from the placeholder).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.sandbox import sandbox_unavailable
from tests.fixtures.tls import TLSFront, backend_port, make_test_ca
from tests.test_canaries import VAULT_TOKEN_SHAPE, files_under
from tests.test_daemon import Daemon, daemon

__all__ = ["daemon"]  # fixture
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

POLICY = """
rules:
  - id: agents
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["127.0.0.1:{port}"]
    grants:
      - provider: vault
        policies: ["ci-*"]
        max_uses: 100
"""

CI_READ = 'path "secret/data/ci/*" { capabilities = ["read"] }'  # as devstack/openbao.py writes it
INSIDE = r"""
env
for f in $(find /run/secrets -type f); do echo "== $f"; cat "$f"; echo; done
curl -sS -i --noproxy '' -H "X-Vault-Token: $(cat /run/secrets/kv/token)" "$VAULT_ADDR/v1/auth/token/lookup-self"
echo
"""


@pytest.fixture
def proxied_daemon(daemon: Daemon, openbao: OpenBao, tmp_path: Path) -> Iterator[tuple[Daemon, int]]:
    (tmp_path / "ca").mkdir()
    test_ca = make_test_ca(tmp_path / "ca", ["vault.test"])
    front = TLSFront(test_ca.context, backend_port(openbao.addr))
    # ci-write (no test else uses it) may also read lookup-self, whose answer names the token itself.
    lookup = 'path "auth/token/lookup-self" { capabilities = ["read"] }'
    openbao.client().sys.create_or_update_policy("ci-write", f"{CI_READ}\n{lookup}")
    provider = daemon.env.providers["vault"]
    provider |= {"proxy_hosts": [f"127.0.0.1:{front.port}"], "upstream_ca_file": str(test_ca.cert_file)}
    daemon.env.write_config()
    daemon.env.write_policy(POLICY.format(port=front.port))
    try:
        yield daemon, front.port
    finally:
        front.close()


@pytest.mark.parametrize("flags", [(), ("--debug", "--verbose")])
def test_exec_through_the_daemon_with_inject_proxy_never_hands_out_the_real_token(
    proxied_daemon: tuple[Daemon, int], openbao: OpenBao, flags: tuple[str, ...]
) -> None:
    daemon, port = proxied_daemon
    daemon.start(*flags)
    text = VAULT_TASK.replace("credentials:", f'network:\n  allow: ["127.0.0.1:{port}"]\ncredentials:').replace(
        "    policies: [ci-read]", "    policies: [ci-write]\n    inject: proxy"
    )
    task = daemon.task(text)
    result = daemon.client(*flags, "exec", "--task", str(task), "--", "sh", "-c", INSIDE)
    assert result.code == 0, result.stderr
    placeholder = (result.stdout.split("== /run/secrets/kv/token\n", 1)[1]).split("\n", 1)[0].strip()
    assert VAULT_TOKEN_SHAPE.fullmatch(placeholder), result.stdout
    assert "request_id" in result.stdout, result.stdout + result.stderr
    lookup = json.loads(result.stdout[result.stdout.index('{"request_id"') :].splitlines()[0])
    assert lookup["data"]["id"] == placeholder  # OpenBao named the real token; the proxy masked it
    accessor = lookup["data"]["accessor"]
    assert accessor in [
        r["reference"]["accessor"] for r in daemon.env.log_records() if r["event"] == "credential.issued"
    ]
    assert daemon.stop(signal.SIGTERM) == 0
    texts = {"client stdout": result.stdout, "client stderr": result.stderr}
    texts |= {str(p): p.read_text(errors="replace") for p in files_under(daemon.env.root, daemon.shared)}
    shapes = {where: set(VAULT_TOKEN_SHAPE.findall(text)) - {placeholder} for where, text in texts.items()}
    assert {where: found for where, found in shapes.items() if found and not where.endswith("-token")} == {}
    assert not openbao.accessor_exists(accessor)
