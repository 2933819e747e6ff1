"""A revocation that fails in an unexpected way does not cost the other credentials their revocation or report."""

from __future__ import annotations

import json
import sqlite3

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.openbao import VAULT_TASK, OpenBao

TWO_VAULT_CREDENTIALS = (
    VAULT_TASK
    + """
  - name: second
    provider: vault
    policies: [ci-read]
    num_uses: 5
"""
)


def test_a_corrupt_store_record_leaves_one_credential_pending_and_revokes_the_other(
    vault_env: BrokerEnv, openbao: OpenBao
) -> None:
    document = vault_env.run("issue", "--task", str(vault_env.write_task(TWO_VAULT_CREDENTIALS)), "--json").json()
    session = document["session"]
    issued = {
        r["credential"]: r["reference"]["accessor"]
        for r in vault_env.log_records()
        if r["event"] == "credential.issued"
    }
    assert set(issued) == {"kv", "second"}
    with sqlite3.connect(vault_env.state_dir / "sessions.db") as db:  # a reference no provider can read
        db.execute("UPDATE credentials SET reference=? WHERE name='kv'", (json.dumps(["not", "a", "mapping"]),))
    result = vault_env.run("revoke", "--session", session, "--json")
    assert result.code == 5, result.stderr
    outcomes = {c["name"]: c["outcome"] for c in result.json()["credentials"]}
    assert outcomes == {"kv": "pending", "second": "revoked"}
    assert result.json()["dir_removed"] is True
    assert not openbao.accessor_exists(issued["second"])
    assert openbao.accessor_exists(issued["kv"])  # left for sweep, not forgotten
    assert "internal error" not in result.stderr


def test_an_unexpected_exception_inside_a_provider_comes_out_as_a_provider_error(vault_env: BrokerEnv) -> None:
    from datetime import UTC, datetime

    import pytest

    from broker.core.inputs.config import load_config
    from broker.vocab.errors import ProviderError
    from providers.base import RevokeTarget

    provider = load_config(vault_env.config_path).providers["vault"]
    target = RevokeTarget(name="kv", reference=["not", "a", "mapping"], expires_at=None)  # type: ignore[arg-type]
    with pytest.raises(ProviderError) as caught:
        provider.revoke(target, datetime.now(UTC))
    assert caught.value.message == "vault vault: revoke failed: unexpected AttributeError"
    assert isinstance(caught.value.__cause__, AttributeError)
