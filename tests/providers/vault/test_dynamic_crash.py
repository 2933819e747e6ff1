"""A broker killed between minting a dynamic secret and recording it leaves nothing behind after ``sweep``.

OpenBao answers through a proxy that holds back only the answer to the
secret's request: the engine has made the user or certificate, the broker
is SIGKILLed before it hears back. ``sweep`` finds the lease holder token by
the session's metadata and revokes it, which revokes the lease.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from urllib.parse import urlparse

import pytest

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.crash import start_issue, tokens_of, wait_for
from tests.fixtures.slowproxy import SlowProxy, slow_proxy
from tests.fixtures.vault_engines import Engines, add_dynamic_vault
from tests.providers.vault.test_database import DB_TASK
from tests.providers.vault.test_pki_ssh import PKI_TASK, SSH_TASK, crl_serials

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0, reason="issues files for uid 1000"),
]


def broker_roles(engines: Engines) -> set[str]:
    return {str(row[0]) for row in engines.postgres.query("SELECT rolname FROM pg_roles WHERE rolname LIKE 'v-%'")}


def leases(engines: Engines, prefix: str) -> set[str]:
    import hvac

    try:
        answer = engines.openbao.client().adapter.list(f"/v1/sys/leases/lookup/{prefix}")
    except hvac.exceptions.InvalidPath:
        return set()
    return set((answer or {}).get("data", {}).get("keys", []))


def kill_after_mint(
    env: BrokerEnv, engines: Engines, task: str, hold: bytes, minted: Callable[[SlowProxy], bool], holders: int = 1
) -> str:
    """Issue through a proxy holding back the answer that carries ``hold``; SIGKILL once ``minted()``."""
    with slow_proxy(urlparse(engines.openbao.addr).port or 0, delay=60, hold=hold) as proxy:
        add_dynamic_vault(env, engines)
        env.providers["vault"]["addr"] = proxy.addr
        env.providers["vault"]["timeout"] = 90
        env.write_config()
        process = start_issue(env, env.write_task(task))
        try:
            wait_for(lambda: minted(proxy) or process.poll() is not None)
            assert process.poll() is None, process.communicate()
            process.send_signal(signal.SIGKILL)
            process.wait(10)
        finally:
            process.kill()
    [live] = env.run("status", "--json").json()
    assert (live["state"], live["credentials"][0]["state"]) == ("issuing", "minting")
    session = str(live["session"])
    assert len(tokens_of(engines.openbao, session)) == holders  # the lease holder, found by its metadata
    env.providers["vault"]["addr"] = engines.openbao.addr
    env.write_config()
    result = env.run("sweep", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["recovered"] == [session]
    assert tokens_of(engines.openbao, session) == []
    assert env.session_dirs() == []
    return session


def test_sigkill_after_the_database_user_is_made_leaves_no_user(dynamic_env: BrokerEnv, engines: Engines) -> None:
    before_roles, before_leases = broker_roles(engines), leases(engines, "database/creds/agent-ro/")
    kill_after_mint(dynamic_env, engines, DB_TASK, b"/creds/agent-ro", lambda _: broker_roles(engines) != before_roles)
    assert broker_roles(engines) == before_roles  # the user Vault made for the dead broker is dropped
    assert leases(engines, "database/creds/agent-ro/") == before_leases
    found = [r for r in dynamic_env.log_records() if r["event"] == "credential.revoked"]
    assert [r["reference"].keys() for r in found if r["reason"].endswith("(found)")] == [{"accessor"}]


def issued_serials(engines: Engines) -> set[str]:
    return set(engines.openbao.client().adapter.list("/v1/pki/certs")["data"]["keys"])


def test_sigkill_after_the_certificate_is_issued_puts_it_in_the_crl(dynamic_env: BrokerEnv, engines: Engines) -> None:
    before = issued_serials(engines)
    kill_after_mint(dynamic_env, engines, PKI_TASK, b"/issue/agent", lambda _: issued_serials(engines) != before)
    [serial] = issued_serials(engines) - before
    assert int(serial.replace(":", "").replace("-", ""), 16) in crl_serials(engines)


def test_sigkill_while_an_ssh_key_is_signed_leaves_no_key_anywhere(dynamic_env: BrokerEnv, engines: Engines) -> None:
    """The key pair lived only in the killed broker: the certificate Vault signed certifies a key nobody holds."""
    session = kill_after_mint(
        dynamic_env, engines, SSH_TASK, b"/sign/agent", lambda proxy: proxy.held.is_set(), holders=0
    )
    [record] = dynamic_env.run("status", "--all", "--json").json()
    assert (record["session"], record["state"]) == (session, "revoked")
    assert not any(p.is_file() for p in dynamic_env.runtime_dir.rglob("*"))
