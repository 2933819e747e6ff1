"""Canaries in fleet mode: the PostgreSQL log, its export and verify, doctor and status never show a secret.

A host of a fleet (real PostgreSQL, real OpenBao) issues, then every fleet
output path runs with every diagnostic flag set: ``audit export`` (stdout and
``--output``), ``audit verify --store``, ``doctor``, ``status --json``,
``audit active``. The minted tokens (captured at ``Provider.mint``) and the
database password (from the pgpass file) must appear in no output, no file and
no row of the table; exported records carry fingerprints only. With a canary
password in the pgpass file (refused by the server) or in the URL, every error
is one line that never shows it.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv, Result, make_env
from tests.fixtures.fleet import FleetDb, create_fleet_db, join_fleet
from tests.fixtures.openbao import VAULT_TASK, OpenBao, add_vault_provider
from tests.fixtures.postgres import SUPERUSER, Postgres
from tests.integration.audit.test_fleet_log import pin_keys, postgres_query
from tests.security.canaries.scan import FLAG_SETS, assert_no_vault_token_shapes, assert_nowhere, minted

__all__ = ["minted"]  # fixture
pytestmark = pytest.mark.server


@pytest.fixture
def fleet_host(tmp_path: Path, openbao: OpenBao, postgres: Postgres) -> Iterator[tuple[BrokerEnv, FleetDb]]:
    db = create_fleet_db(postgres, tmp_path)
    folder = tmp_path / "host-a"
    folder.mkdir()
    env = make_env(folder)
    add_vault_provider(env, openbao)
    try:
        yield join_fleet(env, db, "host-a"), db
    finally:
        env.cleanup()


def fleet_outputs(env: BrokerEnv, db: FleetDb, pinned: Path) -> list[Result]:
    results: list[Result] = []
    for number, flags in enumerate(FLAG_SETS):
        exported = env.root / f"export-{number}.jsonl"
        results += [
            env.run(*flags, "audit", "export"),
            env.run(*flags, "audit", "export", "--output", str(exported)),
            env.run(*flags, "audit", "verify", "--store", db.url, "--public-key", str(pinned), "--strict"),
            env.run(*flags, "audit", "verify", "--store", db.url, "--public-key", str(pinned), "--json"),
            env.run(*flags, "doctor"),
            env.run(*flags, "doctor", "--json"),
            env.run(*flags, "status", "--all", "--json"),
            env.run(*flags, "audit", "active", "--json"),
        ]
    return results


def test_fleet_export_verify_doctor_and_status_show_no_token_and_no_database_password(
    fleet_host: tuple[BrokerEnv, FleetDb], postgres: Postgres, minted: set[str]
) -> None:
    env, db = fleet_host
    task = str(env.write_task(VAULT_TASK))
    issued = [env.run(*flags, "issue", "--task", task, "--json") for flags in FLAG_SETS]
    assert [r.code for r in issued] == [0] * len(FLAG_SETS), [r.stderr for r in issued]
    assert len(minted) >= len(FLAG_SETS)
    results = [*issued, *fleet_outputs(env, db, pin_keys(env))]
    checked = [r for i, r in enumerate(results[len(issued) :]) if i % 8 not in (4, 5)]  # doctor may find faults
    assert [r.code for r in checked] == [0] * len(checked), [r.stderr for r in checked if r.code]
    assert sum("credential.issued" in r.stdout for r in checked) == len(FLAG_SETS)  # export to stdout has them
    assert all("Traceback" not in r.stderr for r in results)
    assert (env.root / "export-0.jsonl").read_text().count('"fingerprint"') >= 1
    revoked = env.run("--debug", "revoke", "--task", "fix-build-7", "--json")
    assert revoked.code == 0, revoked.stderr
    rows = "\n".join(str(row[0]) for row in postgres_query(postgres, db, "SELECT record FROM issuance_log"))
    rows += "\n".join(str(row) for row in postgres_query(postgres, db, "SELECT * FROM credentials"))
    needles = [*minted, postgres.password]
    assert all(n not in rows for n in needles)
    assert_nowhere(needles, [*results, revoked], env.root, env.state_dir, env.runtime_dir)
    assert_no_vault_token_shapes(results, env.root)


@pytest.mark.parametrize("where", ["pgpass", "url"])
def test_a_canary_database_password_is_never_shown_by_fleet_errors(
    fleet_host: tuple[BrokerEnv, FleetDb], postgres: Postgres, where: str
) -> None:
    env, db = fleet_host
    password = "CANARY-pg-" + secrets.token_hex(12)
    pinned = env.root / "fleet.pub"
    pinned.write_text("")
    if where == "pgpass":
        db.passfile.write_text(f"{postgres.host}:{postgres.port}:{db.name}:{SUPERUSER}:{password}\n")
        store = db.url
    else:
        env.settings["store"] = f"postgresql://{SUPERUSER}:{password}@{postgres.host}:{postgres.port}/{db.name}"
        env.write_config()
        store = str(env.settings["store"])
    results: list[Result] = []
    for flags in FLAG_SETS:
        results += [
            env.run(*flags, "audit", "export"),
            env.run(*flags, "audit", "export", "--output", str(env.root / "out.jsonl")),
            env.run(*flags, "audit", "verify", "--store", str(store), "--public-key", str(pinned)),
            env.run(*flags, "audit", "verify", "--store", f"{db.url}?password={password}", "--public-key", str(pinned)),
            env.run(*flags, "doctor", "--json"),
            env.run(*flags, "status", "--all", "--json"),
            env.run(*flags, "issue", "--task", str(env.write_task(VAULT_TASK))),
        ]
    assert all(r.code != 0 for r in results), [(r.code, r.stdout) for r in results if r.code == 0]
    assert all("Traceback" not in r.stderr for r in results)
    assert any("password" in r.stderr or "password" in r.stdout for r in results)  # the refusal is explained
    assert_nowhere([password], results, env.root / "out.jsonl", env.state_dir, env.runtime_dir)  # not the config
