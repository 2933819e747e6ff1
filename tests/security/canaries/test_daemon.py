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
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import Result
from tests.fixtures.daemon import WAIT, Daemon, _wait_for, daemon
from tests.fixtures.openbao import VAULT_TASK, OpenBao
from tests.fixtures.sandbox import sandbox_unavailable, vault_egress_policy
from tests.fixtures.tls import TLSFront, backend_port, make_test_ca
from tests.security.canaries.scan import VAULT_TOKEN_SHAPE, files_under

__all__ = ["daemon"]  # fixture
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]


CI_READ = 'path "secret/data/ci/*" { capabilities = ["read"] }'  # as devstack/openbao.py writes it
# Certificates (public, and long enough to fill the pipe) are left out of the dump.
INSIDE = r"""
env
for f in $(find /run/secrets -type f ! -name '*.pem'); do echo "== $f"; cat "$f"; echo; done
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
    daemon.env.write_policy(vault_egress_policy(front.port))
    try:
        yield daemon, front.port
    finally:
        front.close()


def _outside_revoke(daemon: Daemon, session: str) -> Result:
    """A direct ``revoke`` on the daemon's host (its config minus the socket), at --debug --verbose: it asks
    the daemon, which stops the command through its control path; its report is what the operator sees."""
    direct = daemon.env.root / "direct.toml"
    text = daemon.env.config_path.read_text()
    direct.write_text("\n".join(line for line in text.splitlines() if not line.startswith("socket = ")) + "\n")
    argv = [sys.executable, "-m", "broker", "--debug", "--verbose", "--config", str(direct)]
    environment = {"PATH": os.environ["PATH"], "HOME": "/"}
    done = subprocess.run(
        [*argv, "revoke", "--session", session, "--json"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=WAIT,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


@pytest.mark.parametrize(("flags", "ending"), [((), "exit"), (("--debug", "--verbose"), "exit"), ((), "revoke")])
def test_exec_through_the_daemon_with_inject_proxy_never_hands_out_the_real_token(
    proxied_daemon: tuple[Daemon, int], openbao: OpenBao, flags: tuple[str, ...], ending: str
) -> None:
    daemon, port = proxied_daemon
    daemon.start(*flags)
    text = VAULT_TASK.replace("credentials:", f'network:\n  allow: ["127.0.0.1:{port}"]\ncredentials:').replace(
        "    policies: [ci-read]", "    policies: [ci-write]\n    inject: proxy"
    )
    task = daemon.task(text)
    workspace = daemon.shared / "workspace"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    script = INSIDE + ("" if ending == "exit" else "touch /workspace/started; exec sleep 600\n")
    argv = [sys.executable, "-m", "broker", *flags, "exec", "--task", str(task), "--workspace", str(workspace)]
    environment = {"PATH": os.environ["PATH"], "BROKER_SOCKET": str(daemon.socket), "HOME": "/"}
    client = subprocess.Popen(
        [*argv, "--", "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )
    reports: list[Result] = []
    try:
        if ending == "revoke":
            _wait_for(lambda: (workspace / "started").exists() or client.poll() is not None, "the command")
            [session] = {r["session"] for r in daemon.env.log_records() if r["event"] == "credential.issued"}
            reports.append(_outside_revoke(daemon, session))
            assert reports[0].code == 0, reports[0].stderr
            assert session in reports[0].stdout
        stdout, stderr = client.communicate(timeout=WAIT)
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode == (0 if ending == "exit" else 128 + signal.SIGTERM), stderr
    placeholder = (stdout.split("== /run/secrets/kv/token\n", 1)[1]).split("\n", 1)[0].strip()
    assert VAULT_TOKEN_SHAPE.fullmatch(placeholder), stdout
    assert "request_id" in stdout, stdout + stderr
    lookup = json.loads(stdout[stdout.index('{"request_id"') :].splitlines()[0])
    assert lookup["data"]["id"] == placeholder  # OpenBao named the real token; the proxy masked it
    accessor = lookup["data"]["accessor"]
    assert accessor in [
        r["reference"]["accessor"] for r in daemon.env.log_records() if r["event"] == "credential.issued"
    ]
    assert daemon.stop(signal.SIGTERM) == 0
    texts = {"client stdout": stdout, "client stderr": stderr}
    texts |= {f"revoke report {i}": r.stdout + r.stderr for i, r in enumerate(reports)}
    texts |= {str(p): p.read_text(errors="replace") for p in files_under(daemon.env.root, daemon.shared)}
    shapes = {where: set(VAULT_TOKEN_SHAPE.findall(text)) - {placeholder} for where, text in texts.items()}
    assert {where: found for where, found in shapes.items() if found and not where.endswith("-token")} == {}
    assert not openbao.accessor_exists(accessor)
