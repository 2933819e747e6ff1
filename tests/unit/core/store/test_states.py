"""The lifecycle enums keep the strings the store, the JSON and the log always held."""

from __future__ import annotations

import json
import sqlite3

from broker.core.store import open_store
from broker.core.store.states import CredentialState, SessionState
from providers.base import RevokeOutcome
from tests.fixtures.brokerenv import BrokerEnv


def test_the_state_strings_are_the_documented_ones() -> None:
    assert [s.value for s in SessionState] == [
        "issuing",
        "active",
        "revoking",
        "revoked",
        "expired",
        "failed",
        "awaiting-approval",
        "denied",
    ]
    assert [s.value for s in CredentialState] == [
        "minting",
        "active",
        "pending",
        "revoked",
        "expired",
        "valid-until-expiry",
        "failed",
    ]
    assert json.dumps([SessionState.ACTIVE, CredentialState.VALID_UNTIL_EXPIRY]) == '["active", "valid-until-expiry"]'


def test_every_revoke_outcome_leaves_the_credential_state_of_the_same_name() -> None:
    assert {outcome: CredentialState.after(outcome).value for outcome in RevokeOutcome} == {
        outcome: outcome.value for outcome in RevokeOutcome
    }


def test_the_store_keeps_plain_strings_and_reads_them_back_as_states(broker_env: BrokerEnv) -> None:
    from datetime import UTC, datetime, timedelta

    from broker.core.store.interface import SessionRecord

    broker_env.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    store = open_store(broker_env.state_dir)
    now = datetime.now(UTC)
    try:
        store.create_session(
            SessionRecord(
                id="s-states000001",
                task="fix-1",
                requester="ci",
                state=SessionState.ISSUING,
                created_at=now,
                expires_at=now + timedelta(minutes=5),
                dir="/run/x",
                mount_path="/run/secrets",
                uid=1000,
                gid=1000,
                mounted=False,
                document=None,
            )
        )
        store.set_session_state("s-states000001", SessionState.ACTIVE)
        record = store.get_session("s-states000001")
        assert record is not None and record.state is SessionState.ACTIVE
    finally:
        store.close()
    with sqlite3.connect(broker_env.state_dir / "sessions.db") as conn:
        (stored,) = conn.execute("SELECT state FROM sessions WHERE id='s-states000001'").fetchone()
    assert type(stored) is str and stored == "active"
