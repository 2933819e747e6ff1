"""A fleet host's daemon acts on asks recorded in the store, never on an announcement alone.

The holder's daemon listens on PostgreSQL's ``broker_revoke`` channel, and
NOTIFY needs no privilege: any role that may connect to the fleet's
database (an auditor's read-only one) can announce any session id. Before
the daemon checked for an ask in ``revoke_requests``, such an announcement
revoked a live session of its host (its GitHub token, its directory).
"""

from __future__ import annotations

import time

import pytest

from tests.fixtures.postgres import Postgres
from tests.integration.audit.test_fleet_log import postgres_query
from tests.integration.daemon.test_fleet_revoke import Fleet, fleet, listening, outcomes, quiet

__all__ = ["fleet"]  # a fixture
pytestmark = pytest.mark.server


def test_an_announcement_nobody_asked_for_revokes_nothing(fleet: Fleet, postgres: Postgres) -> None:
    """NOTIFY needs no privilege: any role that may connect (an auditor's read-only one) can announce a session id.

    Only an ask recorded in ``revoke_requests`` (written by a host's revoke) makes the holder act; the announcement
    only wakes it."""
    listening(fleet.a.start(), fleet.db, postgres)
    forged, asked = str(fleet.issue_on_a()["session"]), str(fleet.issue_on_a()["session"])
    postgres_query(postgres, fleet.db, "SELECT pg_notify('broker_revoke', %s)", forged)
    result = fleet.b.env.run("revoke", "--session", asked, "--json")  # heard after the forged one
    assert result.code == 0 and outcomes(result.json()) == {"repo": "revoked", "kv": "revoked"}, result.stderr
    time.sleep(1)  # room for a revocation of the forged one running beside the asked one
    assert fleet.token_states() == ["revoked", "valid"]
    assert fleet.a.env.session_dirs() == [forged]
    states = {item["session"]: item["state"] for item in fleet.a.client("status", "--all", "--json").json()}
    assert states == {forged: "active", asked: "revoked"}
    assert fleet.a.stop() == 0
    quiet(fleet.a)
