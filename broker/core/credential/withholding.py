"""Withholding: a credential a provider returned that is not handed out is logged, then revoked.

It may fail a check after minting (``MintRejected``), or the broker may fail
to keep its revocation secret, store its reference or log it. Either way it
exists at the provider: its ``credential.issued`` record says ``withheld``
and carries its fingerprint (so ``audit lookup`` finds it), and it is revoked
at once or kept ``pending`` for ``sweep``. Nothing here stops at a store or
log that cannot be written: the revocation happens regardless.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from broker.core.broker import Broker
from broker.core.credential.revoke import revoke_credential
from broker.core.store.interface import CredentialRecord
from broker.core.store.states import CredentialState
from broker.vocab.errors import BrokerError
from broker.vocab.logs import event
from providers.base import MintedCredential

LOG = logging.getLogger("broker.issue")


def cause_text(exc: BaseException) -> str:
    """One line naming a failure, for messages and the log (an OSError's text, never its arguments)."""
    if isinstance(exc, BrokerError):
        return exc.message
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return f"{type(exc).__name__}: {exc.strerror}" if isinstance(exc, OSError) and exc.strerror else type(exc).__name__


def fate(outcome: CredentialState) -> str:
    """What became of a withheld credential, for the error message."""
    if outcome in (CredentialState.REVOKED, CredentialState.EXPIRED):
        return "revoked it"
    if outcome == CredentialState.VALID_UNTIL_EXPIRY:
        return "it stays valid until it expires (revoke = expire)"
    return "revoking it failed; it stays pending for broker sweep"


def withhold(broker: Broker, fields: Mapping[str, Any], credential: MintedCredential, *, why: str) -> CredentialState:
    """A credential the provider returned that is not handed out: log it with its fingerprint, then revoke it.

    ``fields`` are its ``credential.issued`` record's (``Minting.issued_fields``). Every write here is best
    effort (the failure being handled may be the store's or the log's); the revocation itself happens
    whatever they do, and when it fails the credential stays ``pending`` for ``sweep``.
    """
    session_id, name, fingerprint = str(fields["session"]), str(fields["credential"]), str(fields["fingerprint"])
    event(LOG, "withheld", credential=name, fingerprint=fingerprint, why=why)
    steps = (
        lambda: broker.store.credential_minted(
            session_id,
            name,
            reference=credential.reference,
            scope=credential.scope,
            expires_at=credential.expires_at,
            fingerprint=fingerprint,
        ),
        lambda: broker.log.append("credential.issued", **fields, withheld=why),
    )
    for step in steps:  # each on its own: a store that refuses must not keep the log from saying so
        try:
            step()
        except (BrokerError, OSError) as exc:
            LOG.warning(
                "withheld credential not recorded",
                extra={
                    "broker_fields": {
                        "session": session_id,
                        "credential": name,
                        "fingerprint": fingerprint,
                        "error": cause_text(exc),
                    }
                },
            )
    record = CredentialRecord(
        session_id=session_id,
        name=name,
        provider=str(fields["provider"]),
        type=str(fields["type"]),
        state=CredentialState.ACTIVE,
        reference=credential.reference,
        scope=credential.scope,
        expires_at=credential.expires_at,
        fingerprint=fingerprint,
    )
    return revoke_credential(
        broker,
        session_id,
        str(fields["task"]),
        record,
        broker.clock(),
        reason="withheld",
        revoke_secret=credential.revoke_secret,
        best_effort=True,
    )
