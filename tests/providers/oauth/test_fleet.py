"""A fleet's hosts sharing one refresh token (kept in Vault) refresh one at a time through the store's advisory
lock: each "host" a process with its own state directory (no lock file in common), its broker opened as a
command opens it on a PostgreSQL store, so only the fleet's lock stands between their refreshes."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest

from broker.core.broker import Broker
from broker.core.inputs.config import load_config
from devstack.postgres import create_fleet_db
from tests.fixtures.brokerenv import make_env
from tests.fixtures.fleet import join_fleet
from tests.fixtures.oauth import OAuthStack
from tests.fixtures.openbao import OpenBao, add_vault_provider
from tests.fixtures.postgres import Postgres
from tests.providers.conformance import context, parse_request

pytestmark = pytest.mark.server
HOSTS = 5


def _host(config: str, start: float, out: Any) -> None:
    loaded = load_config(Path(config))
    Broker.open(loaded)  # a PostgreSQL store: the provider gets the fleet's lock
    provider: Any = loaded.providers["oauth"]
    request = parse_request(type(provider), {"scopes": ["issues:read"]})
    time.sleep(max(0.0, start - time.time()))
    try:
        provider.mint(request, context("s-fleet00001"))
        out.put("minted")
    except Exception as exc:  # each host's outcome, counted by the test
        out.put(getattr(exc, "message", type(exc).__name__))


def test_hosts_of_a_fleet_refresh_one_shared_token_one_at_a_time(
    oauth_stack: OAuthStack, openbao: OpenBao, postgres: Postgres, tmp_path: Path
) -> None:
    db = create_fleet_db(postgres, tmp_path)
    first = oauth_stack.authorise()
    openbao.client().secrets.kv.v2.create_or_update_secret(path="oauth/fleet", secret={"refresh_token": first})
    configs = []
    for number in range(HOSTS):
        folder = tmp_path / f"host-{number}"
        folder.mkdir()
        env = make_env(folder)
        add_vault_provider(env, openbao)
        env.add_provider("oauth", oauth_stack.table(refresh_token_vault="vault", refresh_token_path="oauth/fleet"))
        configs.append(str(join_fleet(env, db, f"host-{number}").config_path))
    Broker.open(load_config(Path(configs[0])))  # the store's schema made once
    oauth_stack.server.refresh_delay = 0.05
    fork = multiprocessing.get_context("fork")
    out = fork.Queue()
    start = time.time() + 2.0
    processes = [fork.Process(target=_host, args=(config, start, out)) for config in configs]
    for process in processes:
        process.start()
    outcomes = [out.get(timeout=90) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    ledger = oauth_stack.ledger
    assert outcomes == ["minted"] * HOSTS
    assert ledger.races == 0 and ledger.reuse_detections == 0
    assert sum(ledger.refreshes.values()) == HOSTS
    kept = openbao.client().secrets.kv.v2.read_secret_version(path="oauth/fleet", raise_on_deleted_version=True)
    assert not ledger.find(kept["data"]["data"]["refresh_token"]).replaced  # the family's live token, written back


def test_a_fleet_keeping_the_refresh_token_in_a_file_is_refused(
    oauth_stack: OAuthStack, postgres: Postgres, tmp_path: Path
) -> None:
    db = create_fleet_db(postgres, tmp_path)
    env = make_env(tmp_path)
    env.add_provider("oauth", oauth_stack.table())
    loaded = load_config(join_fleet(env, db, "host-a").config_path)
    Broker.open(loaded)
    provider: Any = loaded.providers["oauth"]
    with pytest.raises(Exception, match="refresh_token_file: a fleet's hosts cannot share a file"):
        provider.mint(parse_request(type(provider), {"scopes": ["issues:read"]}), context("s-fleet00002"))
    assert sum(oauth_stack.ledger.grants.values()) == 0
