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
from tests.fixtures.slowproxy import slow_proxy
from tests.fixtures.vault_engines import Engines, add_dynamic_vault
from tests.test_vault_database import DB_TASK

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


def kill_after_mint(env: BrokerEnv, engines: Engines, task: str, hold: bytes, minted: Callable[[], bool]) -> str:
    """Issue through a proxy holding back the answer that carries ``hold``; SIGKILL once ``minted()``."""
    with slow_proxy(urlparse(engines.openbao.addr).port or 0, delay=60, hold=hold) as proxy:
        add_dynamic_vault(env, engines)
        env.providers["vault"]["addr"] = proxy.addr
        env.providers["vault"]["timeout"] = 90
        env.write_config()
        process = start_issue(env, env.write_task(task))
        try:
            wait_for(lambda: minted() or process.poll() is not None)
            assert process.poll() is None, process.communicate()
            process.send_signal(signal.SIGKILL)
            process.wait(10)
        finally:
            process.kill()
    [live] = env.run("status", "--json").json()
    assert (live["state"], live["credentials"][0]["state"]) == ("issuing", "minting")
    session = str(live["session"])
    assert len(tokens_of(engines.openbao, session)) == 1  # the lease holder, found by its metadata
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
    kill_after_mint(dynamic_env, engines, DB_TASK, b"/creds/agent-ro", lambda: broker_roles(engines) != before_roles)
    assert broker_roles(engines) == before_roles  # the user Vault made for the dead broker is dropped
    assert leases(engines, "database/creds/agent-ro/") == before_leases
    found = [r for r in dynamic_env.log_records() if r["event"] == "credential.revoked"]
    assert [r["reference"].keys() for r in found if r["reason"].endswith("(found)")] == [{"accessor"}]
